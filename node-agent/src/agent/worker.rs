//! A worker's part: watch the head's cluster view, start this node's Ray
//! once the head's GCS is up, report when it joined (or why it could not),
//! and restart it, within bounds, if it dies while the job runs. A head that
//! drops out before the cluster is ready sends the worker back to the
//! election.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::cluster::{ClusterView, NodeState, Phase};
use super::election::address_of;
use super::launcher::Event;
use super::mesh::{Mesh, Peer, Views, WatchRefused};
use super::node_ray::{job_notice, launch, start_ray, stop_ray};
use super::part::{End, Prepared};
use super::ray::{self, NodePorts};
use super::state::{Role, Shared};
use super::view::sync_node_state;
use crate::fault::Fault;

/// How long a worker whose Ray failed before the cluster was ready waits to
/// hear that the head itself dropped out (its GCS going away fails the
/// workers' `ray start` too), before it reports the failure as its own.
const HEAD_NEWS_GRACE: Duration = Duration::from_secs(3);

/// A worker's connection to its head and what it knows of its own Ray.
struct Worker<'a> {
    shared: &'a Arc<Shared>,
    ip: IpAddr,
    head: Peer,
    head_node: String,
    events: mpsc::Receiver<Event>,
    ports: NodePorts,
    /// `ray start` was sent.
    sent: bool,
    /// This node's Ray joined the cluster and the head was told so.
    joined: bool,
    /// Restarts of this node's Ray while the job ran, so far.
    restarts: u32,
}

pub async fn run(shared: &Arc<Shared>, ip: IpAddr, mut head: Peer, head_node: String, prepared: Prepared) -> End {
    let (events, ports) = match prepared {
        Ok(p) => p,
        Err(f) => {
            let _ = head.report(&Err(f.clone())).await;
            return f.into();
        }
    };
    let mut stream = match open_watch(&mut head, &head_node).await {
        Ok(s) => s,
        Err(end) => return end,
    };
    let mut w = Worker { shared, ip, head, head_node, events, ports, sent: false, joined: false, restarts: 0 };
    loop {
        tokio::select! {
            msg = stream.next() => {
                if let Some(end) = w.on_view(msg).await {
                    return end;
                }
            }
            ev = w.events.recv(), if w.sent => {
                if let Some(end) = w.on_event(ev, &mut stream).await {
                    return end;
                }
            }
        }
    }
}

/// SIGTERM before the cluster is ready means Slurm is ending the job (it
/// was cancelled, or its time is up): a worker tells its head, and a head
/// fails the cluster, so that the steps waiting for it on every node return
/// at once. Otherwise they wait on for a cluster that cannot come, and
/// Slurm, whose kill of a step still in its SPANK hooks waits up to two
/// minutes, keeps the job completing that long.
pub async fn leave(shared: &Shared, mesh: &Mesh) {
    if matches!(*shared.node_state.borrow(), NodeState::Ready) {
        return;
    }
    let message = Fault::user(format!("Slurm is ending the job on {} (its agent was told to stop)", shared.spec.node));
    let role = shared.role.borrow().clone();
    let head = match role {
        Role::Follower(h) => h,
        Role::Head => return super::view::publish_failure(shared, &message),
        Role::Undecided | Role::SteppedDown => return,
    };
    let tell = async {
        let ip = address_of(&shared.spec, &head).await?;
        let (mut head, _) = mesh.join(ip).await?;
        head.report(&Err(message)).await.ok()
    };
    match tokio::time::timeout(Duration::from_secs(3), tell).await {
        Ok(Some(_)) => info!(head = %head, "told the head this node leaves before the cluster was ready"),
        _ => warn!(head = %head, "could not tell the head this node leaves"),
    }
}

/// The head's stream of cluster views.
async fn open_watch(head: &mut Peer, head_node: &str) -> Result<Views, End> {
    match head.watch().await {
        Ok(s) => Ok(s),
        // It was head when we asked, and no longer is: elect again.
        Err(WatchRefused::NotHead) => {
            Err(End::Reelect { head: head_node.to_string(), lost: false, why: "it stepped down".into() })
        }
        Err(WatchRefused::Failed(e)) => {
            Err(End::Failed(Fault::user(format!("cannot watch the head node {head_node}: {e}"))))
        }
    }
}

impl Worker<'_> {
    /// A view from the head (or the stream's end): mirror it, and start this
    /// node's Ray once the head's GCS is up.
    async fn on_view(&mut self, msg: Option<ClusterView>) -> Option<End> {
        let Some(v) = msg else {
            return Some(lost_head(self.shared, &self.head_node, "its agent stopped answering"));
        };
        if let Some(end) = follow(self.shared, &self.head_node, v, self.joined) {
            return Some(end);
        }
        if !self.sent && !self.shared.view.borrow().gcs_address.is_empty() {
            self.sent = true;
            start_worker_ray(self.shared, self.ip, &self.ports).await;
        }
        None
    }

    /// An event of this node's launcher, once `ray start` was sent.
    async fn on_event(&mut self, ev: Option<Event>, stream: &mut Views) -> Option<End> {
        let spec = &self.shared.spec;
        let joined = self.joined;
        let failure = match ev {
            Some(Event::LauncherReady) => return None,
            Some(Event::Started) if !joined => return self.tell_joined().await,
            Some(Event::Started) => return None,
            Some(Event::Died) | Some(Event::Exited) | None if joined && self.restarts < spec.config.ray_restarts => {
                return self.restart_ray().await
            }
            Some(Event::Failed(m)) => format!("Ray worker on {}: {m}", spec.node),
            Some(Event::Died) | Some(Event::Exited) | None if joined => {
                format!("the Ray node on {} ended while the job ran: {}", spec.node, ray::log_tail(spec, 3))
            }
            Some(Event::Died) | Some(Event::Exited) | None => {
                let image = super::node_ray::image_of(self.shared);
                format!(
                    "Ray worker on {}: the container of image {image} ended early: {}",
                    spec.node,
                    ray::log_tail(spec, 4)
                )
            }
        };
        Some(self.failed(Fault::user(failure), stream).await)
    }

    /// This node's Ray joined: tell the head, and the job if it was a restart.
    async fn tell_joined(&mut self) -> Option<End> {
        let (shared, spec) = (self.shared, &self.shared.spec);
        info!("Ray worker joined");
        if self.restarts > 0 {
            job_notice(shared, &format!(
                "syndeo: the Ray node on {} died while the job ran; restarted it ({} of {}) and it rejoined the cluster",
                spec.node, self.restarts, spec.config.ray_restarts
            ));
        }
        if let Err(e) = self.head.report(&Ok(())).await {
            return Some(lost_head(shared, &self.head_node, &e));
        }
        self.joined = true;
        sync_node_state(shared, true);
        if let Some(line) = shared.restart_notice() {
            job_notice(shared, &line);
        }
        None
    }

    /// This node's Ray died while the job ran: a fresh container rejoins.
    async fn restart_ray(&mut self) -> Option<End> {
        let shared = self.shared;
        self.restarts += 1;
        self.joined = false;
        warn!(
            restarts = self.restarts,
            "this node's Ray died while the job ran: {}; restarting it",
            ray::log_tail(&shared.spec, 3)
        );
        stop_ray(shared, Duration::from_secs(2)).await;
        match launch(shared, self.ip).await {
            Ok((events, ports)) => (self.events, self.ports) = (events, ports),
            Err(f) => return Some(f.into()),
        }
        start_worker_ray(shared, self.ip, &self.ports).await;
        None
    }

    /// This node's Ray could not join. Before the cluster is ready, the
    /// cause may be the head's Ray going away: then this is the head's news,
    /// not ours. Otherwise the head hears of it.
    async fn failed(&mut self, failure: Fault, stream: &mut Views) -> End {
        let (shared, joined) = (self.shared, self.joined);
        if shared.view.borrow().phase != Phase::Ready {
            let news = async {
                loop {
                    match stream.next().await {
                        Some(v) => {
                            if let Some(end) = follow(shared, &self.head_node, v, joined) {
                                return end;
                            }
                        }
                        _ => return lost_head(shared, &self.head_node, "its agent stopped answering"),
                    }
                }
            };
            if let Ok(end) = tokio::time::timeout(HEAD_NEWS_GRACE, news).await {
                return end;
            }
        }
        let _ = self.head.report(&Err(failure.clone())).await;
        End::Failed(failure)
    }
}

/// Mirrors a view from the head (`joined`: this node's Ray joined); Some
/// when it ends this worker's part: the cluster failed, or the head stepped
/// down (or another node took over).
fn follow(shared: &Shared, head_node: &str, v: ClusterView, joined: bool) -> Option<End> {
    let reelect = matches!(v.phase, Phase::Reelect(_));
    if reelect || (!v.head_node.is_empty() && v.head_node != head_node) {
        let why = match &v.phase {
            Phase::Reelect(why) => why.clone(),
            Phase::Failed(f) => f.to_string(),
            _ => String::new(),
        };
        let why = if why.is_empty() { "it stepped down".to_string() } else { why };
        return Some(End::Reelect { head: head_node.to_string(), lost: false, why });
    }
    let failed = match &v.phase {
        Phase::Failed(f) => Some(f.clone()),
        _ => None,
    };
    shared.view.send_replace(v);
    sync_node_state(shared, joined);
    failed.map(End::Failed)
}

/// The head's agent stopped answering: before the cluster is ready, the
/// others elect again without it; after, the job's cluster is gone.
fn lost_head(shared: &Shared, head_node: &str, why: &str) -> End {
    if shared.view.borrow().phase == Phase::Ready {
        return End::Failed(Fault::user(format!("lost contact with the head node {head_node}'s agent")));
    }
    End::Reelect { head: head_node.to_string(), lost: true, why: why.to_string() }
}

/// `ray start --address` for this worker, to the head's GCS and with this
/// node's memory as the cluster view has them. A launcher that cannot take
/// the arguments says why on its events, so a failure here is only logged.
async fn start_worker_ray(shared: &Shared, ip: IpAddr, ports: &NodePorts) {
    let (gcs, memory) = {
        let v = shared.view.borrow();
        let cgroup = shared.spec.cgroup.memory_mb;
        (v.gcs_address.clone(), cgroup.or_else(|| v.memory_mb.get(&shared.spec.node).copied()))
    };
    if let Err(e) = start_ray(shared, ip, &ray::worker_args(&shared.spec, ip, &gcs, ports, memory), ports).await {
        warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::agent::mesh::served_agent;
    use crate::config::PortRange;
    use crate::job::simulated_spec;

    /// An agent of job 4646 on a loopback address, its mesh served.
    async fn agent(nodes: &[&str], index: usize) -> (Arc<Shared>, Arc<Mesh>) {
        let mut spec = simulated_spec(4646, nodes, index);
        spec.config.mesh_ports = PortRange::new(47100, 47199).unwrap();
        served_agent(spec, &"t".repeat(64)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn told_to_stop_before_ready_a_worker_tells_its_head_a_head_fails_the_cluster_a_ready_one_says_nothing() {
        let nodes = ["127.0.0.8", "127.0.0.9"];
        let (head, head_mesh) = agent(&nodes, 0).await;
        let cluster = head.become_head();
        let (worker, mesh) = agent(&nodes, 1).await;
        worker.role.send_replace(Role::Follower("127.0.0.8".into()));

        worker.set_state(NodeState::Ready);
        leave(&worker, &mesh).await;
        assert!(cluster.reports.lock().await.is_empty(), "a ready worker's stop is the job's normal end");

        worker.set_state(NodeState::Starting("joining".into()));
        leave(&worker, &mesh).await;
        let got = cluster.reports.lock().await.get("127.0.0.9").cloned();
        assert!(
            matches!(&got, Some(Err(f)) if f.to_string().contains("Slurm is ending the job on 127.0.0.9")),
            "the head recorded {got:?}"
        );

        leave(&head, &head_mesh).await;
        let phase = head.view.borrow().phase.clone();
        assert!(
            matches!(&phase, Phase::Failed(f) if f.to_string().contains("Slurm is ending the job on 127.0.0.8")),
            "the head itself stopping fails the cluster: {phase:?}"
        );
    }
}
