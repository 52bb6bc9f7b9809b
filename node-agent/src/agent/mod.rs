//! The node agent (`syndeo-agent serve`, kept running by the supervisor), one
//! per node and job, running as the job user. It serves the local socket for
//! job steps, joins the mesh of the job's agents, elects a head, runs Ray in
//! the container, and stops it all on SIGTERM from the epilog. An agent
//! started again after it was killed rejoins the cluster as a worker.
//!
//! Who calls whom: `lifecycle` orchestrates `election`, then `head` or
//! `worker`; those use `node_ray` (this node's Ray, through the `launcher`
//! seam: `container` in production) and `view` (the cluster view). `mesh`
//! and `local` serve RPCs from `state` and `view`, never from the roles.
//!
//! The data, and which way the imports point: `cluster` (the view and its
//! `Phase`, this node's state: plain data) <- `state` (`Shared`, what the
//! tasks share; `HeadCluster`, what only a head keeps) <- `view` (publish,
//! derive, count) <- `mesh` (the only user of the generated protobuf types,
//! converted in `mesh/wire.rs`) <- the roles. The roles call peers through
//! `mesh::Mesh` (the job's key, the socket), made beside `Shared`.
mod backoff;
mod cluster;
mod container;
mod driver_hook;
mod election;
mod head;
pub mod launcher;
mod lifecycle;
mod local;
mod mesh;
mod metrics_sd;
mod node_ray;
mod part;
pub mod ports;
pub mod ray;
pub mod ray_version;
mod state;
mod view;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;

pub use cluster::NodeState;
pub use container::{ContainerLauncher, LAUNCHER_SCRIPT};
pub use mesh::counters::{install as install_mesh_counter, MeshCounter};
pub use state::{Role, Shared};

use crate::job::{JobSpec, JobState};
use mesh::Mesh;

/// `syndeo-agent serve`, started by the supervisor with the job's state and
/// the mesh's socket as descriptors. `image`: the image the supervisor
/// resolved at the job's start; `restart`: this is the Nth start after the
/// agent ended unexpectedly, and how.
pub fn serve(image: Option<PathBuf>, restart: Option<(u32, String)>) -> Result<()> {
    crate::supervisor::unblock_for_agent();
    let state = JobState::inherited()?;
    let mesh_socket = inherited_mesh_socket()?;
    let mut spec = state.spec;
    spec.cgroup = crate::cgroup::JobCgroup::of_this_process();
    if let Some(image) = image {
        spec.image = Some(image.display().to_string());
    }
    let log = std::fs::OpenOptions::new().create(true).append(true).open(spec.dir().agent_log())?;
    tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(log))
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SYNDEO_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    if let Err(e) = driver_hook::install(&spec) {
        tracing::warn!("{e}");
    }
    let mesh = Mesh::new(&spec, &state.secret, mesh_socket)?;
    let mut shared = Shared::new(spec, Arc::new(ContainerLauncher));
    shared.restart = restart;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run_until_stopped(Arc::new(shared), Arc::new(mesh)))?;
    // Ray is stopped; the tasks left (the mesh and local servers) need no wait.
    rt.shutdown_background();
    Ok(())
}

/// One node's agent without its local socket or signals: its shared state,
/// and its lifecycle (election, the mesh, its role) to run as a task. Its
/// mesh binds the first free one of the job's ports on the node's address,
/// not a socket from root. For agents run in a process of one's own (the
/// mesh simulation, crate `syndeo-mesh-sim`).
pub fn agent(
    spec: JobSpec,
    job_secret: &str,
    launcher: Arc<dyn launcher::Launcher>,
) -> Result<(Arc<Shared>, impl std::future::Future<Output = ()> + Send + 'static), crate::fault::Fault> {
    let mesh = Arc::new(Mesh::new(&spec, job_secret, None)?);
    let shared = Arc::new(Shared::new(spec, launcher));
    Ok((shared.clone(), lifecycle::run(shared, mesh)))
}

/// The mesh's listening socket root bound (systemd's LISTEN_FDS
/// convention); the descriptors stay out of the containers' reach.
fn inherited_mesh_socket() -> Result<Option<std::net::TcpListener>> {
    let listener = listenfd::ListenFd::from_env().take_tcp_listener(0).context("the inherited mesh socket")?;
    for fd in [crate::root::start::MESH_FD, crate::root::start::STATE_FD] {
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    }
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var(crate::job::STATE_FD_VAR);
    Ok(listener)
}

/// Serves the local socket and runs this node's lifecycle until SIGTERM,
/// then stops Ray.
async fn run_until_stopped(shared: Arc<Shared>, mesh: Arc<Mesh>) -> Result<()> {
    let spec = &shared.spec;
    info!(job = spec.job_id, node = %spec.node, index = spec.index, restart = ?shared.restart, "agent started");
    let listener = local::bind(&spec.dir().socket())?;
    tokio::spawn(local::serve(shared.clone(), listener));
    let mut term = signal(SignalKind::terminate())?;
    let life = tokio::spawn(lifecycle::run(shared.clone(), mesh.clone()));
    tokio::select! {
        _ = term.recv() => {
            info!("SIGTERM: stopping Ray");
            worker::leave(&shared, &mesh).await;
        }
        r = life => info!("lifecycle ended: {r:?}"),
    }
    lifecycle::stop(&shared).await;
    info!("agent exits");
    Ok(())
}
