//! A worker's part: watch the head's cluster view, start this node's Ray
//! once the head's GCS is up, report when it joined (or why it could not),
//! and restart it, within bounds, if it dies while the job runs. A head that
//! drops out before the cluster is ready sends the worker back to the
//! election.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use tracing::{info, warn};

use super::lifecycle::{job_notice, spawn_container, start_ray, stop_ray, sync_local, End, Prepared};
use super::mesh::authed;
use super::mesh::pb::{cluster_view::Phase, mesh_client::MeshClient, ClusterView, NodeReport, WatchRequest};
use super::ray::{self, Event, NodePorts};
use super::state::Shared;

/// How long a worker whose Ray failed before the cluster was ready waits to
/// hear that the head itself dropped out (its GCS going away fails the
/// workers' `ray start` too), before it reports the failure as its own.
const HEAD_NEWS_GRACE: Duration = Duration::from_secs(3);

pub async fn run(
    shared: &Arc<Shared>,
    ip: IpAddr,
    mut head: MeshClient<Channel>,
    head_node: String,
    prepared: Prepared,
) -> End {
    let spec = &shared.spec;
    let report = |ok: bool, message: String| {
        authed(shared, NodeReport { job_id: spec.job_id, node: spec.node.clone(), ok, message })
    };
    let (mut events, mut ports) = match prepared {
        Ok(p) => p,
        Err(m) => {
            let _ = head.report(report(false, m.clone())).await;
            return End::Failed(m);
        }
    };
    let req = authed(shared, WatchRequest { job_id: spec.job_id, node: spec.node.clone() });
    let mut stream = match head.watch(req).await {
        Ok(s) => s.into_inner(),
        // It was head when we asked, and no longer is: elect again.
        Err(e) if e.code() == tonic::Code::FailedPrecondition => {
            return End::Reelect { head: head_node, lost: false, why: "it stepped down".into() }
        }
        Err(e) => return End::Failed(format!("cannot watch the head node {head_node}: {}", e.message())),
    };
    // `ray start` was sent / restarts so far (whether this node's Ray joined
    // is `shared.has_joined()`).
    let (mut sent, mut restarts) = (false, 0u32);
    loop {
        tokio::select! {
            msg = stream.message() => {
                let v = match msg {
                    Ok(Some(v)) => v,
                    _ => return lost_head(shared, &head_node, "its agent stopped answering"),
                };
                if let Some(end) = follow(shared, &head_node, v) {
                    return end;
                }
                if !sent && !shared.view.borrow().gcs_address.is_empty() {
                    sent = true;
                    start_worker_ray(shared, ip, &ports).await;
                }
            }
            ev = events.recv(), if sent => {
                let failure = match ev {
                    Some(Event::LauncherReady) => continue,
                    Some(Event::Started) if !shared.has_joined() => {
                        info!("Ray worker joined");
                        if restarts > 0 {
                            job_notice(shared, &format!(
                                "syndeo: the Ray node on {} died while the job ran; restarted it ({restarts} of {}) and it rejoined the cluster",
                                spec.node, spec.config.ray_restarts
                            ));
                        }
                        if let Err(e) = head.report(report(true, String::new())).await {
                            return lost_head(shared, &head_node, e.message());
                        }
                        shared.set_joined(true);
                        sync_local(shared);
                        if let Some(line) = shared.restart_notice() {
                            job_notice(shared, &line);
                        }
                        continue;
                    }
                    Some(Event::Started) => continue,
                    Some(Event::Died) | Some(Event::Exited) | None if shared.has_joined() && restarts < spec.config.ray_restarts => {
                        restarts += 1;
                        shared.set_joined(false);
                        warn!(restarts, "this node's Ray died while the job ran: {}; restarting it", ray::log_tail(&spec.job_dir, 3));
                        stop_ray(shared, Duration::from_secs(2)).await;
                        let (proc_, ev, p) = match spawn_container(shared, ip) {
                            Ok(c) => c,
                            Err(m) => return End::Failed(m),
                        };
                        shared.ray.lock().await.replace(proc_);
                        (events, ports) = (ev, p);
                        start_worker_ray(shared, ip, &ports).await;
                        continue;
                    }
                    Some(Event::Failed(m)) => format!("Ray worker on {}: {m}", spec.node),
                    Some(Event::Died) | Some(Event::Exited) | None if shared.has_joined() => {
                        format!("the Ray node on {} ended while the job ran: {}", spec.node, ray::log_tail(&spec.job_dir, 3))
                    }
                    Some(Event::Died) | Some(Event::Exited) | None => {
                        format!("Ray worker on {}: the container ended early: {}", spec.node, ray::log_tail(&spec.job_dir, 4))
                    }
                };
                // Before the cluster is ready, the cause may be the head's
                // Ray going away: then this is the head's news, not ours.
                if shared.view.borrow().phase() != Phase::Ready {
                    let news = async {
                        loop {
                            match stream.message().await {
                                Ok(Some(v)) => {
                                    if let Some(end) = follow(shared, &head_node, v) {
                                        return end;
                                    }
                                }
                                _ => return lost_head(shared, &head_node, "its agent stopped answering"),
                            }
                        }
                    };
                    if let Ok(end) = tokio::time::timeout(HEAD_NEWS_GRACE, news).await {
                        return end;
                    }
                }
                let _ = head.report(report(false, failure.clone())).await;
                return End::Failed(failure);
            }
        }
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
    sync_local(shared);
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
        (v.gcs_address.clone(), v.memory_mb.get(&shared.spec.node).copied())
    };
    if let Err(e) = start_ray(shared, &ray::worker_args(&shared.spec, ip, &gcs, ports, memory)).await {
        warn!("{e}");
    }
}
