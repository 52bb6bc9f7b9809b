//! The node agent (`syndeo-agent serve`, kept running by `supervisor.rs`),
//! one per node and job, running as the job user. It serves the local socket
//! for job steps, joins the mesh of the job's agents, elects a head, runs Ray
//! in the container, and stops it all on SIGTERM from the epilog. An agent
//! started again after it was killed rejoins the cluster as a worker.
mod election;
mod head;
mod lifecycle;
mod local;
mod mesh;
#[cfg(feature = "mesh-bench")]
pub mod meshbench;
mod ray;
mod state;
mod worker;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;

use crate::job::{JobSpec, LOG_FILE, SECRET_FILE, SPEC_FILE};
use crate::secret;
pub use local::request as local_request;
use state::Shared;

/// `restart`: this is the Nth start after the agent ended unexpectedly, and how.
pub fn run(job_dir: &Path, restart: Option<(u32, String)>) -> Result<()> {
    crate::supervisor::unblock_for_agent();
    let spec: JobSpec =
        serde_json::from_str(&std::fs::read_to_string(job_dir.join(SPEC_FILE))?).context("reading the job spec")?;
    let job_secret = std::fs::read_to_string(job_dir.join(SECRET_FILE))?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(job_dir.join(LOG_FILE))?;
    tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(log))
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SYNDEO_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let mut shared = Shared::new(spec, secret::mesh_token(&job_secret));
        shared.restart = restart;
        let shared = Arc::new(shared);
        info!(job = shared.spec.job_id, node = %shared.spec.node, index = shared.spec.index, restart = ?shared.restart, "agent started");
        let listener = local::bind(&shared.spec.socket())?;
        tokio::spawn(local::serve(shared.clone(), listener));
        let mut term = signal(SignalKind::terminate())?;
        let life = tokio::spawn(lifecycle::run(shared.clone()));
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: stopping Ray"),
            r = life => info!("lifecycle ended: {r:?}"),
        }
        lifecycle::stop(&shared).await;
        info!("agent exits");
        Ok::<_, anyhow::Error>(())
    })?;
    // Ray is stopped; the tasks left (the mesh and local servers) need no wait.
    rt.shutdown_background();
    Ok(())
}
