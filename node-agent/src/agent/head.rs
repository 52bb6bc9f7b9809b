//! The head's part: make the cluster's Ray token, start the Ray head, publish
//! the GCS address as soon as the GCS, this job's own, listens, and derive the cluster's
//! phase from the workers' reports until it is ready, or failed. A head whose
//! Ray fails before the cluster is ready steps down (REELECT) instead.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::cluster::Phase;
use super::election::address_of;
use super::launcher::Event;
use super::mesh::Mesh;
use super::node_ray::{job_notice, start_ray, started, StartFailure};
use super::part::{Dropped, End, Prepared};
use super::ports;
use super::ray::{self, HeadPorts, NodePorts};
use super::state::{HeadCluster, Settle, Shared};
use super::view::{self, publish, publish_failure};
use crate::fault::Fault;
use crate::job::JobSpec;

/// The head's part, with what it keeps for its workers (`head`).
pub async fn run(
    shared: &Arc<Shared>,
    mesh: &Mesh,
    head: Arc<HeadCluster>,
    ip: IpAddr,
    prepared: Prepared,
    t0: Instant,
    dropped: &Dropped,
) -> End {
    let (mut events, ports) = match prepared {
        Ok(p) => p,
        // The cluster's message names the node before what its fault says.
        Err(f) => return fail(shared, Fault::user(format!("{} (head): {f}", shared.spec.node))),
    };
    if let Err(end) = count_lost_nodes(shared, mesh, &head, dropped).await {
        return end;
    }
    let head_ports = match take_office(shared, ip, &ports, dropped).await {
        Ok(p) => p,
        Err(end) => return end,
    };
    if let Err(end) = start_head(shared, &head, ip, &head_ports, &ports, &mut events, t0).await {
        return end;
    }
    let deadline = t0 + Duration::from_secs(shared.spec.config.startup_timeout);
    let deadline = tokio::spawn(fail_at_deadline(shared.clone(), head.clone(), deadline));
    let settle = tokio::spawn(settle(shared.clone(), head));
    let end = watch_own_ray(shared, events).await;
    deadline.abort();
    settle.abort();
    end
}

/// How long Ready waits for Ray's status to list the joined nodes.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// Ready means ready: once the agents count enough nodes joined, the head's
/// launcher waits until Ray's own status (what `ray status` prints) lists
/// them all active; by then every node's resources reached the GCS, and the
/// schedulers spread over all of them. Then the cluster is Ready. If Ray's
/// status lags past `SETTLE_LIMIT`, it is Ready anyway (logged): Ray works.
async fn settle(shared: Arc<Shared>, head: Arc<HeadCluster>) {
    if head.settle.subscribe().wait_for(|s| *s != Settle::Joining).await.is_err() {
        return;
    }
    let joined = view::joined(&*head.reports.lock().await);
    let gcs = shared.view.borrow().gcs_address.clone();
    let t = Instant::now();
    let answer = match shared.ray.lock().await.as_mut() {
        Some(ray) => ray.sees(joined, &gcs, SETTLE_LIMIT).await,
        None => Err("this node's Ray is gone".into()),
    };
    match answer {
        Ok(n) => info!("Ray lists {n} nodes active {:?} after they joined", t.elapsed()),
        Err(why) => warn!("Ray's status does not list the {joined} joined nodes ({why}); ready anyway"),
    }
    head.settle.send_replace(Settle::Settled);
    view::recount(&shared, &head).await;
}

/// Nodes whose agent is gone count as failed, unless it is back (its
/// supervisor restarted it: it rejoins as a worker); too few fails now.
async fn count_lost_nodes(shared: &Shared, mesh: &Mesh, head: &HeadCluster, dropped: &Dropped) -> Result<(), End> {
    let spec = &shared.spec;
    let mut lost: Vec<(&String, &String)> =
        dropped.iter().filter(|(_, (is_lost, _))| *is_lost).map(|(n, (_, why))| (n, why)).collect();
    if spec.nodes.len() - lost.len() < spec.min_nodes() {
        lost = still_lost(&shared.spec, mesh, lost).await;
    }
    let mut reports = head.reports.lock().await;
    for (n, why) in &lost {
        reports.insert(
            n.to_string(),
            Err(Fault::user(format!("its agent was lost before the cluster was ready ({why})"))),
        );
    }
    drop(reports);
    if spec.nodes.len() - lost.len() >= spec.min_nodes() {
        return Ok(());
    }
    let each: Vec<String> = lost.iter().map(|(n, why)| format!("{n}: {why}")).collect();
    Err(fail(
        shared,
        Fault::user(format!(
            "only {} of the job's {} nodes are left and the cluster needs {} (min_nodes): {}",
            spec.nodes.len() - lost.len(),
            spec.nodes.len(),
            spec.min_nodes(),
            each.join("; ")
        )),
    ))
}

/// How long a new head waits for lost nodes' agents to answer again (their
/// supervisor restarts them within a second) before it counts them out.
const REJOIN_GRACE: Duration = Duration::from_secs(5);

/// The nodes of `lost` whose agent has not answered the mesh again within
/// `REJOIN_GRACE`.
async fn still_lost<'a>(
    spec: &JobSpec,
    mesh: &Mesh,
    mut lost: Vec<(&'a String, &'a String)>,
) -> Vec<(&'a String, &'a String)> {
    let until = Instant::now() + REJOIN_GRACE;
    while !lost.is_empty() && Instant::now() < until {
        let mut left = Vec::new();
        for (n, why) in lost {
            let answer = async { mesh.join(address_of(spec, n).await?).await };
            let left_time = until.saturating_duration_since(Instant::now());
            if matches!(tokio::time::timeout(left_time, answer).await, Ok(Some(_))) {
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

/// The new head's view: a fresh Ray token, what Slurm says of the job, and
/// a notice in the job's stderr for each head that dropped out before.
async fn take_office(shared: &Shared, ip: IpAddr, ports: &NodePorts, dropped: &Dropped) -> Result<HeadPorts, End> {
    let spec = &shared.spec;
    let token =
        crate::secret::random_token().map_err(|e| fail(shared, Fault::node(format!("no random token: {e}"))))?;
    let job = shared.launcher.slurm_job(spec.cluster()).await;
    let head_ports =
        HeadPorts::pick(spec, ports).map_err(|e| fail(shared, Fault::user(format!("no free port on {ip}: {e}"))))?;
    publish(shared, |v| {
        v.phase = Phase::Starting;
        v.head_node = spec.node.clone();
        v.gcs_address.clear();
        v.ready_nodes.clear();
        v.ray_token = token;
        v.memory_mb = job.memory_mb.into_iter().collect();
        v.job_stderr = job.stderr.unwrap_or_default();
    });
    for (n, (_, why)) in dropped {
        let line = format!(
            "syndeo: the Ray head on {n} dropped out before the cluster was ready ({why}); {} is the head now",
            spec.node
        );
        job_notice(shared, &line);
    }
    Ok(head_ports)
}

/// `ray start --head`, and HEAD_READY once it is up. A Ray that loaded and
/// then failed is this node's fault: step down; one that did not load is the
/// image's: the cluster fails (every node would fail the same way).
async fn start_head(
    shared: &Shared,
    head: &HeadCluster,
    ip: IpAddr,
    head_ports: &HeadPorts,
    ports: &NodePorts,
    events: &mut mpsc::Receiver<Event>,
    t0: Instant,
) -> Result<(), End> {
    let spec = &shared.spec;
    let own_memory = spec.cgroup.memory_mb.or_else(|| shared.view.borrow().memory_mb.get(&spec.node).copied());
    let args = ray::head_args(spec, ip, head_ports, ports, own_memory);
    start_ray(shared, ip, &args, ports).await.map_err(|f| fail(shared, f))?;
    if let Err(f) = head_started(shared, ip, head_ports.gcs, events, t0).await {
        return Err(if f.loaded { step_down(shared, f.message) } else { fail(shared, Fault::user(f.message)) });
    }
    info!("Ray head started in {:?}", t0.elapsed());
    let note = dashboard_note(shared);
    publish(shared, |v| {
        match &note {
            None => v.dashboard_url = format!("http://{ip}:{}", head_ports.dashboard),
            Some(why) => v.dashboard_note = why.clone(),
        }
        v.phase = Phase::HeadReady;
    });
    view::recount(shared, head).await;
    Ok(())
}

/// Why the head's Ray runs without a dashboard, or None when it has one.
fn dashboard_note(shared: &Shared) -> Option<String> {
    if !shared.spec.config.dashboard {
        return Some("the site turned it off (dashboard = false in syndeo.toml)".into());
    }
    let has = shared.image_ray.lock().ok().and_then(|r| r.as_ref().and_then(|r| r.dashboard));
    (has == Some(false)).then(|| {
        format!(
            "image {}'s Ray has no dashboard or jobs API; install ray[default] in the image for them",
            super::node_ray::image_of(shared)
        )
    })
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
) -> Result<(), StartFailure> {
    let gcs_address = format!("{ip}:{gcs}");
    let publish_address = || publish(shared, |v| v.gcs_address = gcs_address.clone());
    let mut published = false;
    let result = {
        let head_started = started(shared, events, "Ray head");
        let gcs_up = own_listener(ip, gcs);
        tokio::pin!(head_started, gcs_up);
        loop {
            tokio::select! {
                own = &mut gcs_up, if !published => {
                    if let Err(message) = own {
                        return Err(StartFailure { message, loaded: true });
                    }
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

/// Waits until a listener takes connections to `ip:port`, read from the
/// kernel's socket tables (nothing is sent to it); Ok if every such listener
/// is this job's uid's, the GCS this head started (its port was held from
/// its pick: `ports.rs`), else why not.
async fn own_listener(ip: IpAddr, port: u16) -> Result<(), String> {
    let me = nix::unistd::getuid().as_raw();
    loop {
        match ports::own_listener(ip, port, me) {
            Err(other) => {
                return Err(format!("{ip}:{port}, the GCS's port, has a listener of uid {other}, not this job's"))
            }
            Ok(true) => return Ok(()),
            Ok(false) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn fail(shared: &Shared, fault: Fault) -> End {
    publish_failure(shared, &fault);
    End::Failed(fault)
}

/// This head's Ray failed before the cluster was ready: the workers elect
/// another head (they see REELECT), and this node rejoins as a worker.
fn step_down(shared: &Shared, why: String) -> End {
    warn!("stepping down as head: {why}");
    publish(shared, |v| {
        v.phase = Phase::Reelect(why.clone());
        v.gcs_address.clear();
    });
    End::Reelect { head: shared.spec.node.clone(), lost: false, why }
}

/// The cluster must be ready by the start-up deadline.
async fn fail_at_deadline(shared: Arc<Shared>, head: Arc<HeadCluster>, deadline: Instant) {
    tokio::time::sleep_until(deadline.into()).await;
    let reports = head.reports.lock().await;
    let phase = shared.view.borrow().phase.clone();
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
    fail(&shared, Fault::user(msg));
}

/// After start: the head's Ray dying before the cluster is ready makes it
/// step down; later, it ends the job's cluster (the head holds its state).
async fn watch_own_ray(shared: &Shared, mut events: mpsc::Receiver<Event>) -> End {
    while let Some(ev) = events.recv().await {
        if matches!(ev, Event::Died | Event::Exited) {
            let (node, tail) = (&shared.spec.node, ray::log_tail(&shared.spec, 3));
            if shared.view.borrow().phase != Phase::Ready {
                return step_down(shared, format!("the Ray head on {node} ended: {tail}"));
            }
            warn!("this node's Ray ended while the job ran");
            return fail(shared, Fault::user(format!("the Ray head on {node} ended while the job ran: {tail}")));
        }
    }
    std::future::pending().await
}
