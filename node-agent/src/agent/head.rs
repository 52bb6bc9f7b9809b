//! The head's part: make the cluster's Ray token, start the Ray head, publish
//! the GCS address as soon as it accepts connections, and derive the cluster's
//! phase from the workers' reports until it is ready, or failed. A head whose
//! Ray fails before the cluster is ready steps down (REELECT) instead.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::lifecycle::{job_notice, publish, start_ray, started, Dropped, End, Prepared};
use super::mesh::pb::cluster_view::Phase;
use super::ray::{self, Event};
use super::state::{Local, Role, Shared};

pub async fn run(shared: &Arc<Shared>, ip: IpAddr, prepared: Prepared, t0: Instant, dropped: &Dropped) -> End {
    let spec = &shared.spec;
    let (events, ports) = match prepared {
        Ok(p) => p,
        Err(msg) => return fail(shared, format!("{} (head): {msg}", spec.node)),
    };
    // Nodes whose agent is gone count as failed, unless it is back (its
    // supervisor restarted it: it rejoins as a worker); too few fails now.
    let mut lost: Vec<(&String, &String)> =
        dropped.iter().filter(|(_, (is_lost, _))| *is_lost).map(|(n, (_, why))| (n, why)).collect();
    if spec.nodes.len() - lost.len() < spec.min_nodes() {
        lost = still_lost(shared, lost).await;
    }
    {
        let mut reports = shared.reports.lock().await;
        for (n, why) in &lost {
            reports.insert(n.to_string(), Err(format!("its agent was lost before the cluster was ready ({why})")));
        }
    }
    let lost: Vec<String> = lost.iter().map(|(n, why)| format!("{n}: {why}")).collect();
    if spec.nodes.len() - lost.len() < spec.min_nodes() {
        return fail(
            shared,
            format!(
                "only {} of the job's {} nodes are left and the cluster needs {} (min_nodes): {}",
                spec.nodes.len() - lost.len(),
                spec.nodes.len(),
                spec.min_nodes(),
                lost.join("; ")
            ),
        );
    }
    let token = match crate::secret::random_token() {
        Ok(t) => t,
        Err(e) => return fail(shared, format!("node fault: no random token: {e}")),
    };
    #[cfg(feature = "mesh-bench")]
    let job = if shared.noop_ray { Default::default() } else { ray::slurm_job(spec.job_id).await };
    #[cfg(not(feature = "mesh-bench"))]
    let job = ray::slurm_job(spec.job_id).await;
    let own_memory = job.memory_mb.get(&spec.node).copied();
    let head_ports = match ray::HeadPorts::pick(ip) {
        Ok(p) => p,
        Err(e) => return fail(shared, format!("no free port on {ip}: {e}")),
    };
    publish(shared, |v| {
        v.set_phase(Phase::Starting);
        v.head_node = spec.node.clone();
        v.gcs_address.clear();
        v.ready_nodes.clear();
        v.message.clear();
        v.ray_token = token;
        v.memory_mb = job.memory_mb.into_iter().collect();
        v.job_stderr = job.stderr.unwrap_or_default();
    });
    for (n, (_, why)) in dropped {
        job_notice(
            shared,
            &format!(
                "syndeo: the Ray head on {n} dropped out before the cluster was ready ({why}); {} is the head now",
                spec.node
            ),
        );
    }
    let mut events = events;
    let args = ray::head_args(spec, ip, &head_ports, &ports, own_memory);
    if let Err(m) = start_ray(shared, &args).await {
        return fail(shared, m);
    }
    if let Err(f) = head_started(shared, ip, head_ports.gcs, &mut events, t0).await {
        return if f.loaded { step_down(shared, f.message) } else { fail(shared, f.message) };
    }
    info!("Ray head started in {:?}", t0.elapsed());
    publish(shared, |v| {
        if spec.config.dashboard {
            v.dashboard_url = format!("http://{ip}:{}", head_ports.dashboard);
        }
        v.set_phase(Phase::HeadReady);
    });
    recompute_view(shared).await;

    let deadline =
        tokio::spawn(fail_at_deadline(shared.clone(), t0 + Duration::from_secs(spec.config.startup_timeout)));
    let end = watch_own_ray(shared, events).await;
    deadline.abort();
    end
}

/// How long a new head waits for lost nodes' agents to answer again (their
/// supervisor restarts them within a second) before it counts them out.
const REJOIN_GRACE: Duration = Duration::from_secs(5);

/// The nodes of `lost` whose agent has not answered the mesh again within
/// `REJOIN_GRACE`.
async fn still_lost<'a>(shared: &Shared, mut lost: Vec<(&'a String, &'a String)>) -> Vec<(&'a String, &'a String)> {
    let until = Instant::now() + REJOIN_GRACE;
    while !lost.is_empty() && Instant::now() < until {
        let mut left = Vec::new();
        for (n, why) in lost {
            let answer = async {
                let ip = super::election::resolve(n).await.ok()?;
                super::mesh::join(shared, ip).await
            };
            let left_time = until.saturating_duration_since(Instant::now());
            let back = matches!(tokio::time::timeout(left_time, answer).await, Ok(Some(_)));
            if back {
                info!(node = %n, "its agent answers again; it will rejoin as a worker");
            } else {
                left.push((n, why));
            }
        }
        lost = left;
        if !lost.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    lost
}

/// The head's `ray start`; the GCS address goes out as soon as the GCS
/// accepts connections, before `ray start` returns: the workers' start
/// overlaps the rest of the head's (its raylet and agents). Ray's own worker
/// start polls the head's GCS with 2 s sleeps, so the launcher polls it for
/// them, every 50 ms (`wait_for_head` in launcher.py); earlier would only
/// poll a GCS that is not there yet.
async fn head_started(
    shared: &Shared,
    ip: IpAddr,
    gcs: u16,
    events: &mut mpsc::Receiver<Event>,
    t0: Instant,
) -> Result<(), super::lifecycle::StartFailure> {
    let gcs_address = format!("{ip}:{gcs}");
    let publish_address = || publish(shared, |v| v.gcs_address = gcs_address.clone());
    let mut published = false;
    let result = {
        let head_started = started(shared, events, "Ray head");
        let gcs_up = async {
            while tokio::net::TcpStream::connect((ip, gcs)).await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::pin!(head_started, gcs_up);
        loop {
            tokio::select! {
                _ = &mut gcs_up, if !published => {
                    info!("GCS up after {:?}; workers may start", t0.elapsed());
                    publish_address();
                    published = true;
                }
                r = &mut head_started => break r,
            }
        }
    };
    if result.is_ok() && !published {
        publish_address();
    }
    result
}

fn fail(shared: &Shared, msg: String) -> End {
    publish(shared, |v| {
        v.set_phase(Phase::Failed);
        v.message = msg.clone();
    });
    End::Failed(msg)
}

/// This head's Ray failed before the cluster was ready: the workers elect
/// another head (they see REELECT), and this node rejoins as a worker.
fn step_down(shared: &Shared, why: String) -> End {
    warn!("stepping down as head: {why}");
    publish(shared, |v| {
        v.set_phase(Phase::Reelect);
        v.gcs_address.clear();
        v.message = why.clone();
    });
    End::Reelect { head: shared.spec.node.clone(), lost: false, why }
}

/// The cluster must be ready by the start-up deadline.
async fn fail_at_deadline(shared: Arc<Shared>, deadline: Instant) {
    tokio::time::sleep_until(deadline.into()).await;
    let reports = shared.reports.lock().await;
    let phase = shared.view.borrow().phase();
    if !matches!(phase, Phase::Starting | Phase::HeadReady) {
        return;
    }
    let spec = &shared.spec;
    let (joined, missing): (Vec<&String>, Vec<&String>) = spec
        .nodes
        .iter()
        .partition(|n| (**n == spec.node && phase == Phase::HeadReady) || matches!(reports.get(*n), Some(Ok(()))));
    let msg = format!(
        "only {} of the {} required nodes joined within the start-up timeout ({} s); missing: {:?}",
        joined.len(),
        spec.min_nodes(),
        spec.config.startup_timeout,
        missing
    );
    drop(reports);
    fail(&shared, msg);
}

/// After start: the head's Ray dying before the cluster is ready makes it
/// step down; later, it ends the job's cluster (the head holds its state).
async fn watch_own_ray(shared: &Shared, mut events: mpsc::Receiver<Event>) -> End {
    while let Some(ev) = events.recv().await {
        if matches!(ev, Event::Died | Event::Exited) {
            let (node, tail) = (&shared.spec.node, ray::log_tail(&shared.spec.job_dir, 3));
            if shared.view.borrow().phase() != Phase::Ready {
                return step_down(shared, format!("the Ray head on {node} ended: {tail}"));
            }
            warn!("this node's Ray ended while the job ran");
            return fail(shared, format!("the Ray head on {node} ended while the job ran: {tail}"));
        }
    }
    std::future::pending().await
}

/// Head: derive the cluster's phase from its own Ray and the workers'
/// reports. O(nodes) per report; the list of ready nodes (in the job's
/// order) is built only once the cluster is ready.
pub async fn recompute_view(shared: &Shared) {
    let reports = shared.reports.lock().await;
    recompute_with(shared, &reports);
}

/// A worker's report: recorded and counted under one lock, so that each
/// report is counted once and the ready list is built once, not per report.
pub async fn record_report(shared: &Shared, node: String, result: Result<(), String>) {
    let mut reports = shared.reports.lock().await;
    if reports.get(&node) == Some(&result) {
        return;
    }
    reports.insert(node, result);
    recompute_with(shared, &reports);
}

fn recompute_with(shared: &Shared, reports: &std::collections::BTreeMap<String, Result<(), String>>) {
    if *shared.role.borrow() != Role::Head {
        return;
    }
    let spec = &shared.spec;
    let phase = shared.view.borrow().phase();
    if matches!(phase, Phase::Failed | Phase::Starting | Phase::Reelect) {
        return;
    }
    let joined = 1 + reports.values().filter(|r| r.is_ok()).count();
    let failed = reports.values().filter(|r| r.is_err()).count();
    if joined >= spec.min_nodes() || phase == Phase::Ready {
        let ready: Vec<String> = spec
            .nodes
            .iter()
            .filter(|n| **n == spec.node || matches!(reports.get(*n), Some(Ok(()))))
            .cloned()
            .collect();
        publish(shared, |v| {
            v.ready_nodes = ready;
            v.set_phase(Phase::Ready);
        });
    } else if spec.nodes.len() - failed < spec.min_nodes() {
        let why: Vec<String> =
            reports.iter().filter_map(|(n, r)| r.as_ref().err().map(|m| format!("{n}: {m}"))).collect();
        publish(shared, |v| {
            v.set_phase(Phase::Failed);
            v.message = why.join("; ");
        });
    } else {
        shared.set_local(Local::Starting(format!("{joined} of {} nodes joined", spec.nodes.len())));
    }
}
