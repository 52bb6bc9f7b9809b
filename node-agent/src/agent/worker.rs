//! A worker's part: watch the head's cluster view, start this node's Ray
//! once the head's GCS is up, report when it joined (or why it could not),
//! and restart it, within bounds, if it dies while the job runs. A head that
//! drops out before the cluster is ready sends the worker back to the
//! election.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::Streaming;
use tracing::{info, warn};

use super::launcher::Event;
use super::mesh::pb::{cluster_view::Phase, mesh_client::MeshClient, ClusterView, NodeReport, WatchRequest};
use super::node_ray::{job_notice, launch, start_ray, stop_ray};
use super::part::{End, Prepared};
use super::ray::{self, NodePorts};
use super::state::Shared;
use super::view::sync_node_state;

/// How long a worker whose Ray failed before the cluster was ready waits to
/// hear that the head itself dropped out (its GCS going away fails the
/// workers' `ray start` too), before it reports the failure as its own.
const HEAD_NEWS_GRACE: Duration = Duration::from_secs(3);

/// A worker's connection to its head and what it knows of its own Ray.
struct Worker<'a> {
    shared: &'a Arc<Shared>,
    ip: IpAddr,
    head: MeshClient<Channel>,
    head_node: String,
    events: mpsc::Receiver<Event>,
    ports: NodePorts,
    /// `ray start` was sent (whether it joined is `shared.has_joined()`).
    sent: bool,
    /// Restarts of this node's Ray while the job ran, so far.
    restarts: u32,
}

pub async fn run(
    shared: &Arc<Shared>,
    ip: IpAddr,
    mut head: MeshClient<Channel>,
    head_node: String,
    prepared: Prepared,
) -> End {
    let (events, ports) = match prepared {
        Ok(p) => p,
        Err(f) => {
            let _ = head.report(report(shared, false, f.to_string())).await;
            return f.into();
        }
    };
    let mut stream = match open_watch(shared, &mut head, &head_node).await {
        Ok(s) => s,
        Err(end) => return end,
    };
    let mut w = Worker { shared, ip, head, head_node, events, ports, sent: false, restarts: 0 };
    loop {
        tokio::select! {
            msg = stream.message() => {
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

fn report(shared: &Shared, ok: bool, message: String) -> NodeReport {
    let spec = &shared.spec;
    NodeReport { job_id: spec.cluster(), node: spec.node.clone(), ok, message }
}

/// The head's stream of cluster views.
async fn open_watch(
    shared: &Shared,
    head: &mut MeshClient<Channel>,
    head_node: &str,
) -> Result<Streaming<ClusterView>, End> {
    let req = WatchRequest { job_id: shared.spec.cluster(), node: shared.spec.node.clone() };
    match head.watch(req).await {
        Ok(s) => Ok(s.into_inner()),
        // It was head when we asked, and no longer is: elect again.
        Err(e) if e.code() == tonic::Code::FailedPrecondition => {
            Err(End::Reelect { head: head_node.to_string(), lost: false, why: "it stepped down".into() })
        }
        Err(e) => Err(End::Failed(format!("cannot watch the head node {head_node}: {}", e.message()))),
    }
}

impl Worker<'_> {
    /// A view from the head (or the stream's end): mirror it, and start this
    /// node's Ray once the head's GCS is up.
    async fn on_view(&mut self, msg: Result<Option<ClusterView>, tonic::Status>) -> Option<End> {
        let Ok(Some(v)) = msg else {
            return Some(lost_head(self.shared, &self.head_node, "its agent stopped answering"));
        };
        if let Some(end) = follow(self.shared, &self.head_node, v) {
            return Some(end);
        }
        if !self.sent && !self.shared.view.borrow().gcs_address.is_empty() {
            self.sent = true;
            start_worker_ray(self.shared, self.ip, &self.ports).await;
        }
        None
    }

    /// An event of this node's launcher, once `ray start` was sent.
    async fn on_event(&mut self, ev: Option<Event>, stream: &mut Streaming<ClusterView>) -> Option<End> {
        let spec = &self.shared.spec;
        let joined = self.shared.has_joined();
        let failure = match ev {
            Some(Event::LauncherReady) => return None,
            Some(Event::Started) if !joined => return self.joined().await,
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
        Some(self.failed(failure, stream).await)
    }

    /// This node's Ray joined: tell the head, and the job if it was a restart.
    async fn joined(&mut self) -> Option<End> {
        let (shared, spec) = (self.shared, &self.shared.spec);
        info!("Ray worker joined");
        if self.restarts > 0 {
            job_notice(shared, &format!(
                "syndeo: the Ray node on {} died while the job ran; restarted it ({} of {}) and it rejoined the cluster",
                spec.node, self.restarts, spec.config.ray_restarts
            ));
        }
        if let Err(e) = self.head.report(report(shared, true, String::new())).await {
            return Some(lost_head(shared, &self.head_node, e.message()));
        }
        shared.set_joined(true);
        sync_node_state(shared);
        if let Some(line) = shared.restart_notice() {
            job_notice(shared, &line);
        }
        None
    }

    /// This node's Ray died while the job ran: a fresh container rejoins.
    async fn restart_ray(&mut self) -> Option<End> {
        let shared = self.shared;
        self.restarts += 1;
        shared.set_joined(false);
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
    async fn failed(&mut self, failure: String, stream: &mut Streaming<ClusterView>) -> End {
        let shared = self.shared;
        if shared.view.borrow().phase() != Phase::Ready {
            let news = async {
                loop {
                    match stream.message().await {
                        Ok(Some(v)) => {
                            if let Some(end) = follow(shared, &self.head_node, v) {
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
        let _ = self.head.report(report(shared, false, failure.clone())).await;
        End::Failed(failure)
    }
}

/// Mirrors a view from the head; Some when it ends this worker's part: the
/// cluster failed, or the head stepped down (or another node took over).
fn follow(shared: &Shared, head_node: &str, v: ClusterView) -> Option<End> {
    let (phase, from) = (v.phase(), v.head_node.clone());
    if phase == Phase::Reelect || (!from.is_empty() && from != head_node) {
        let why = if v.message.is_empty() { "it stepped down".to_string() } else { v.message.clone() };
        return Some(End::Reelect { head: head_node.to_string(), lost: false, why });
    }
    shared.view.send_replace(v);
    sync_node_state(shared);
    (phase == Phase::Failed).then(|| End::Failed(shared.view.borrow().message.clone()))
}

/// The head's agent stopped answering: before the cluster is ready, the
/// others elect again without it; after, the job's cluster is gone.
fn lost_head(shared: &Shared, head_node: &str, why: &str) -> End {
    if shared.view.borrow().phase() == Phase::Ready {
        return End::Failed(format!("lost contact with the head node {head_node}'s agent"));
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
