//! One node's life in the job's cluster: start the container early (Ray's
//! imports overlap the election and the head's start), elect, then run the
//! head's or a worker's part (`head.rs`, `worker.rs`). A head that drops out
//! before the cluster is ready (its Ray failed, or its agent is gone) is
//! passed over and the nodes elect again, each with a fresh container.
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::election::{elect, resolve};
use super::mesh::pb::{cluster_view::Phase, ClusterView};
use super::mesh::{self};
use super::ray::{self, Event, NodePorts, RayProcess};
use super::state::{Local, Role, Shared};
use super::{head, worker};

pub async fn run(shared: Arc<Shared>) {
    let started = Instant::now();
    if let Err(msg) = node_part(&shared, started).await {
        shared.fail(msg);
    }
    // Keep serving job steps (and the mesh) until the epilog stops us.
    std::future::pending::<()>().await;
}

/// How this node's part as head or worker ended (it runs until then).
#[derive(Debug)]
pub enum End {
    /// The job's cluster failed; the message says why and what to do.
    Failed(String),
    /// Before the cluster was ready, `head` dropped out: its Ray failed (its
    /// agent lives on and rejoins as a worker), or its agent is gone (`lost`).
    /// Elect again without it.
    Reelect { head: String, lost: bool, why: String },
}

impl From<String> for End {
    fn from(m: String) -> End {
        End::Failed(m)
    }
}

/// Heads that dropped out before the cluster was ready, and why; `lost`:
/// their agent is gone, so their node will not join either.
pub type Dropped = BTreeMap<String, (bool, String)>;

async fn node_part(shared: &Arc<Shared>, t0: Instant) -> Result<(), String> {
    let spec = &shared.spec;
    let node = spec.node.clone();
    let ip = resolve(&node).await.map_err(|e| format!("node fault: cannot resolve this node's name {node}: {e}"))?;
    let (mut round, mut passed, mut dropped) = (t0, BTreeSet::new(), Dropped::new());
    if shared.restart.is_some() {
        // This agent's earlier run (head or worker) ended with its process,
        // and its Ray with it: rejoin the others' cluster as a worker.
        passed.insert(node.clone());
        shared.role.send_replace(Role::Out);
        shared.set_local(Local::Starting("this node's agent was restarted; it is rejoining the cluster".into()));
    }
    let (listener, port) = mesh::bind(ip, &spec.mesh_ports()).await.map_err(|e| e.to_string())?;
    info!(%ip, port, "mesh listening");
    tokio::spawn(mesh::serve(shared.clone(), listener));

    // The user's image is checked as the user; a mistake here fails the job, not the node.
    let mut prepared = prepare(shared, ip).await;
    let give_up = t0 + Duration::from_secs(spec.config.startup_timeout);
    loop {
        let (role, head_client) = elect(shared, round, give_up, &mut passed).await.map_err(|e| e.to_string())?;
        if role == Role::Head {
            // Watchers of the new head must not see a view mirrored from an old one.
            shared.view.send_replace(ClusterView { head_node: node.clone(), ..Default::default() });
        }
        shared.role.send_replace(role.clone());
        let end = match role {
            Role::Head => head::run(shared, ip, prepared, t0, &dropped).await,
            Role::Follower(h) => {
                worker::run(shared, ip, head_client.expect("follower has a client"), h, prepared).await
            }
            Role::Undecided | Role::Out => unreachable!("elect decides"),
        };
        let (head, lost, why) = match end {
            End::Failed(m) => return Err(m),
            End::Reelect { head, lost, why } => (head, lost, why),
        };
        warn!(%head, lost, "the head dropped out before the cluster was ready ({why}); electing again without it");
        passed.insert(head.clone());
        dropped.insert(head.clone(), (lost, why));
        if passed.len() >= spec.nodes.len() {
            let each: Vec<String> = dropped.iter().map(|(n, (_, why))| format!("{n}: {why}")).collect();
            let msg = format!("no node could start the Ray head: {}", each.join("; "));
            publish(shared, |v| {
                v.set_phase(Phase::Failed);
                v.message = msg.clone();
            });
            return Err(msg);
        }
        shared.role.send_replace(if head == node { Role::Out } else { Role::Undecided });
        shared.set_joined(false);
        shared.set_local(Local::Starting(format!("the head {head} dropped out; electing another")));
        // A fresh container: this node's Ray may have joined the old head's.
        stop_ray(shared, Duration::from_secs(2)).await;
        prepared = prepare(shared, ip).await;
        round = Instant::now();
    }
}

pub type Prepared = Result<(mpsc::Receiver<Event>, NodePorts), String>;

/// Checks the image and starts the container with the launcher, which loads Ray and waits.
async fn prepare(shared: &Arc<Shared>, ip: IpAddr) -> Prepared {
    let spec = &shared.spec;
    #[cfg(feature = "mesh-bench")]
    if shared.noop_ray {
        let (proc_, events) = RayProcess::noop();
        shared.ray.lock().await.replace(proc_);
        return Ok((events, NodePorts::pick(ip).map_err(|e| e.to_string())?));
    }
    let image = spec.image_path()?;
    crate::runtime::check_image(shared.runtime.as_ref(), &image, &spec.config.allowed_image_dirs)?;
    if !spec.workdir.is_dir() {
        return Err(format!(
            "the job's working directory {} is not accessible on {}",
            spec.workdir.display(),
            spec.node
        ));
    }
    if let Some(bad) =
        spec.config.extra_binds.iter().filter_map(|b| crate::runtime::Bind::parse(b).ok()).find(|b| !b.src.exists())
    {
        return Err(format!("node fault: extra bind {} does not exist on {}", bad.src.display(), spec.node));
    }
    let (proc_, events, ports) = spawn_container(shared, ip)?;
    shared.ray.lock().await.replace(proc_);
    Ok((events, ports))
}

/// A fresh Ray container on this node (fresh ports), its launcher loading Ray.
pub fn spawn_container(shared: &Shared, ip: IpAddr) -> Result<(RayProcess, mpsc::Receiver<Event>, NodePorts), String> {
    let spec = &shared.spec;
    let image = spec.image_path()?;
    let ports = NodePorts::pick(ip).map_err(|e| format!("no free port on {ip}: {e}"))?;
    let cs = ray::ray_container(spec, &image, &ports);
    let argv = shared.runtime.command(&cs, &["python3".into(), "-c".into(), ray::LAUNCHER.into()])?;
    let (proc_, events) = RayProcess::spawn(&argv, &spec.job_dir).map_err(|e| format!("node fault: {e:#}"))?;
    Ok((proc_, events, ports))
}

/// One line in the job's stderr (which the head learned from Slurm), written
/// as the user; the agent's log has it in any case.
pub fn job_notice(shared: &Shared, line: &str) {
    warn!("{line}");
    let path = shared.view.borrow().job_stderr.clone();
    if path.is_empty() {
        return;
    }
    use std::io::Write;
    let written = std::fs::OpenOptions::new().append(true).open(&path).and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        warn!("cannot add to the job's stderr {path}: {e}");
    }
}

/// Why a node's `ray start` did not bring its Ray up. `loaded`: the launcher
/// had loaded Ray first, so the image is fine and the fault is this node's.
pub struct StartFailure {
    pub message: String,
    pub loaded: bool,
}

/// Waits for the launcher's answer to `ray start`, or explains why it failed.
pub async fn started(shared: &Shared, events: &mut mpsc::Receiver<Event>, what: &str) -> Result<(), StartFailure> {
    let mut loaded = false;
    loop {
        let message = match events.recv().await {
            Some(Event::LauncherReady) => {
                loaded = true;
                continue;
            }
            Some(Event::Started) => return Ok(()),
            Some(Event::Failed(m)) => format!("{what} on {}: {m}", shared.spec.node),
            Some(Event::Died) | Some(Event::Exited) | None => {
                let tail = ray::log_tail(&shared.spec.job_dir, 4);
                format!("{what} on {}: the container ended early: {tail}", shared.spec.node)
            }
        };
        return Err(StartFailure { message, loaded });
    }
}

pub fn publish(shared: &Shared, f: impl FnOnce(&mut ClusterView)) {
    shared.view.send_modify(f);
    let light = broadcast_view(&shared.view.borrow());
    shared.broadcast.send_if_modified(|b| {
        let changed = *b != light;
        *b = light;
        changed
    });
    sync_local(shared);
}

/// The view as workers receive it: no per-node lists, and the ready nodes
/// as one hostlist expression once the cluster is ready.
fn broadcast_view(v: &ClusterView) -> ClusterView {
    let ready = v.phase() == Phase::Ready;
    ClusterView {
        phase: v.phase,
        head_node: v.head_node.clone(),
        gcs_address: v.gcs_address.clone(),
        message: v.message.clone(),
        ready_nodes: Vec::new(),
        dashboard_url: v.dashboard_url.clone(),
        ray_token: v.ray_token.clone(),
        memory_mb: Default::default(),
        job_stderr: v.job_stderr.clone(),
        ready_hostlist: if ready { crate::hostlist::compress(&v.ready_nodes) } else { String::new() },
    }
}

/// This node's state follows the cluster view (and its own Ray's state).
pub fn sync_local(shared: &Shared) {
    let local = {
        let v = shared.view.borrow();
        let node = &shared.spec.node;
        match v.phase() {
            Phase::Failed => Local::Failed(v.message.clone()),
            // A worker knows it joined (it told the head); the head has the list.
            Phase::Ready if shared.has_joined() || v.ready_nodes.contains(node) => Local::Ready,
            Phase::Ready => Local::Starting(format!("the cluster is ready; {node}'s Ray has not joined it yet")),
            // The head counts the nodes that join (`recompute_view`); workers hear of them once ready.
            Phase::HeadReady if v.head_node == *node => {
                Local::Starting("the head is up; waiting for the workers".into())
            }
            Phase::HeadReady => Local::Starting("the head is up; this node's Ray is joining it".into()),
            Phase::Starting => Local::Starting("the head is starting Ray".into()),
            Phase::Reelect => Local::Starting(format!("electing another head: {}", v.message)),
        }
    };
    match local {
        Local::Failed(m) => shared.fail(m),
        l => shared.set_local(l),
    }
}

/// Starts this node's Ray with the cluster's token, which is also written to
/// `ray_token` (0600, in the user's 0700 job dir) for the user's own tools.
pub async fn start_ray(shared: &Shared, args: &[String]) -> Result<(), String> {
    let token = shared.view.borrow().ray_token.clone();
    if token.is_empty() {
        return Err("node fault: the head sent no Ray auth token".into());
    }
    write_private(&shared.spec.job_dir.join(crate::job::RAY_TOKEN_FILE), &token)
        .map_err(|e| format!("node fault: writing the Ray token in {}: {e}", shared.spec.job_dir.display()))?;
    let mut guard = shared.ray.lock().await;
    let p = guard.as_mut().ok_or("the Ray container is gone")?;
    p.start(args, &token)
        .await
        .map_err(|e| format!("the Ray container on {} did not take its arguments: {e}", shared.spec.node))
}

fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(content.as_bytes())
}

/// SIGTERM: stop this node's Ray (gracefully, then by force).
pub async fn stop(shared: &Shared) {
    stop_ray(shared, Duration::from_secs(shared.spec.config.stop_grace.saturating_sub(3).max(2))).await;
}

/// Stops this node's Ray container, if any: gracefully, by force after `grace`.
pub async fn stop_ray(shared: &Shared, grace: Duration) {
    if let Some(p) = shared.ray.lock().await.take() {
        p.stop(grace).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(phase: Phase, nodes: usize) -> ClusterView {
        let mut v = ClusterView {
            head_node: "node0001".into(),
            gcs_address: "10.0.0.1:6379".into(),
            ray_token: "t".into(),
            ready_nodes: (1..=nodes).map(|i| format!("node{i:04}")).collect(),
            memory_mb: (1..=nodes).map(|i| (format!("node{i:04}"), 4096)).collect(),
            ..Default::default()
        };
        v.set_phase(phase);
        v
    }

    /// What a worker receives costs the same for 4,096 nodes as for 4: no
    /// per-node list; the ready nodes come as one hostlist expression, and
    /// only once the cluster is ready.
    #[test]
    fn workers_views_carry_no_per_node_lists_only_a_hostlist_once_ready() {
        let starting = broadcast_view(&view(Phase::HeadReady, 4096));
        assert!(starting.ready_nodes.is_empty() && starting.memory_mb.is_empty());
        assert_eq!(starting.ready_hostlist, "");
        assert_eq!((starting.gcs_address.as_str(), starting.ray_token.as_str()), ("10.0.0.1:6379", "t"));
        let ready = broadcast_view(&view(Phase::Ready, 4096));
        assert!(ready.ready_nodes.is_empty() && ready.memory_mb.is_empty());
        assert_eq!(ready.ready_hostlist, "node[0001-4096]");
        assert_eq!(crate::hostlist::expand(&ready.ready_hostlist).unwrap(), view(Phase::Ready, 4096).ready_nodes);
    }
}
