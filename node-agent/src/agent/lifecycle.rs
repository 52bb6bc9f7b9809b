//! One node's life in the job's cluster: start the container early (Ray's
//! imports overlap the election and the head's start), elect, then run the
//! head's or a worker's part, and keep this node's state for job steps.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::transport::Channel;
use tracing::{info, warn};

use super::election::{elect, resolve};
use super::mesh::pb::{cluster_view::Phase, mesh_client::MeshClient, ClusterView, NodeReport, WatchRequest};
use super::mesh::{self, authed};
use super::ray::{self, Event, NodePorts, RayProcess};
use super::state::{Local, Role, Shared};

pub async fn run(shared: Arc<Shared>) {
    let started = Instant::now();
    if let Err(msg) = node_part(&shared, started).await {
        shared.fail(msg);
    }
    // Keep serving job steps (and the mesh) until the epilog stops us.
    std::future::pending::<()>().await;
}

async fn node_part(shared: &Arc<Shared>, started: Instant) -> Result<(), String> {
    let spec = &shared.spec;
    let node = spec.node.clone();
    let ip = resolve(&node).await.map_err(|e| format!("node fault: cannot resolve this node's name {node}: {e}"))?;
    let (listener, port) = mesh::bind(ip, &spec.mesh_ports()).await.map_err(|e| e.to_string())?;
    info!(%ip, port, "mesh listening");
    tokio::spawn(mesh::serve(shared.clone(), listener));

    // The user's image is checked as the user; a mistake here fails the job, not the node.
    let prepared = prepare(shared, ip);
    let (role, head_client) = match elect(shared, started).await {
        Ok(r) => r,
        Err(e) => return Err(e.to_string()),
    };
    shared.role.send_replace(role.clone());
    match (role, prepared) {
        (Role::Head, Ok((events, ports))) => head(shared, ip, events, ports, started).await,
        (Role::Head, Err(msg)) => {
            publish(shared, |v| {
                v.set_phase(Phase::Failed);
                v.message = format!("{node} (head): {msg}");
            });
            Err(msg)
        }
        (Role::Follower(h), prepared) => worker(shared, ip, head_client.expect("follower has a client"), h, prepared).await,
        (Role::Undecided, _) => unreachable!("elect decides"),
    }
}

type Prepared = Result<(mpsc::Receiver<Event>, NodePorts), String>;

/// Checks the image and starts the container with the launcher, which loads Ray and waits.
fn prepare(shared: &Arc<Shared>, ip: IpAddr) -> Prepared {
    let spec = &shared.spec;
    let image = spec.image_path()?;
    crate::runtime::check_image(shared.runtime.as_ref(), &image, &spec.config.allowed_image_dirs)?;
    if !spec.workdir.is_dir() {
        return Err(format!("the job's working directory {} is not accessible on {}", spec.workdir.display(), spec.node));
    }
    if let Some(bad) = spec.config.extra_binds.iter().filter_map(|b| crate::runtime::Bind::parse(b).ok()).find(|b| !b.src.exists()) {
        return Err(format!("node fault: extra bind {} does not exist on {}", bad.src.display(), spec.node));
    }
    let (proc_, events, ports) = spawn_container(shared, ip)?;
    shared.ray.try_lock().expect("nobody else holds it yet").replace(proc_);
    Ok((events, ports))
}

/// A fresh Ray container on this node (fresh ports), its launcher loading Ray.
fn spawn_container(shared: &Shared, ip: IpAddr) -> Result<(RayProcess, mpsc::Receiver<Event>, NodePorts), String> {
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
fn job_notice(shared: &Shared, line: &str) {
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

/// Waits for the launcher's answer to `ray start`, or explains why it failed.
async fn started(shared: &Shared, events: &mut mpsc::Receiver<Event>, what: &str) -> Result<(), String> {
    loop {
        match events.recv().await {
            Some(Event::LauncherReady) => continue,
            Some(Event::Started) => return Ok(()),
            Some(Event::Failed(m)) => return Err(format!("{what} on {}: {m}", shared.spec.node)),
            Some(Event::Died) | Some(Event::Exited) | None => {
                let tail = ray::log_tail(&shared.spec.job_dir, 4);
                return Err(format!("{what} on {}: the container ended early: {tail}", shared.spec.node));
            }
        }
    }
}

fn publish(shared: &Shared, f: impl FnOnce(&mut ClusterView)) {
    shared.view.send_modify(f);
    sync_local(shared);
}

/// This node's state follows the cluster view (and its own Ray's state).
fn sync_local(shared: &Shared) {
    let v = shared.view.borrow().clone();
    match v.phase() {
        Phase::Failed => shared.fail(v.message.clone()),
        Phase::Ready if v.ready_nodes.contains(&shared.spec.node) => shared.set_local(Local::Ready),
        Phase::Ready | Phase::HeadReady => {
            shared.set_local(Local::Starting(format!("{} of {} nodes joined", v.ready_nodes.len(), shared.spec.nodes.len())))
        }
        Phase::Starting => shared.set_local(Local::Starting("the head is starting Ray".into())),
    }
}

async fn head(
    shared: &Arc<Shared>,
    ip: IpAddr,
    mut events: mpsc::Receiver<Event>,
    ports: NodePorts,
    t0: Instant,
) -> Result<(), String> {
    let spec = &shared.spec;
    let token = crate::secret::random_token().map_err(|e| format!("node fault: no random token: {e}"))?;
    let job = ray::slurm_job(spec.job_id).await;
    let own_memory = job.memory_mb.get(&spec.node).copied();
    let pick = || -> std::io::Result<(u16, u16)> { Ok((ray::free_port(ip).map_err(std::io::Error::other)?, ray::free_port(ip).map_err(std::io::Error::other)?)) };
    let (gcs, dash) = pick().map_err(|e| format!("no free port on {ip}: {e}"))?;
    publish(shared, |v| {
        v.set_phase(Phase::Starting);
        v.head_node = spec.node.clone();
        v.ray_token = token;
        v.memory_mb = job.memory_mb.into_iter().collect();
        v.job_stderr = job.stderr.unwrap_or_default();
    });
    let args = ray::head_args(spec, ip, gcs, dash, &ports, own_memory);
    start_ray(shared, &args).await?;
    // The GCS address goes out as soon as the GCS accepts connections, before
    // the head's `ray start` returns: the workers' start overlaps the rest of
    // the head's (its raylet and agents). Earlier, they would only poll a GCS
    // that is not there yet, and on a busy node that costs more than it saves.
    let gcs_address = format!("{ip}:{gcs}");
    let publish_address = || publish(shared, |v| v.gcs_address = gcs_address.clone());
    let mut published = false;
    let result = {
        let head_started = started(shared, &mut events, "Ray head");
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
    if let Err(m) = result {
        publish(shared, |v| {
            v.set_phase(Phase::Failed);
            v.message = m.clone();
        });
        return Err(m);
    }
    info!("Ray head started in {:?}", t0.elapsed());
    publish(shared, |v| {
        if spec.config.dashboard {
            v.dashboard_url = format!("http://{ip}:{dash}");
        }
        v.set_phase(Phase::HeadReady);
    });
    recompute_view(shared).await;

    // The cluster must be ready by the start-up deadline.
    let deadline = t0 + Duration::from_secs(spec.config.startup_timeout);
    let shared2 = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(deadline.into()).await;
        let v = shared2.view.borrow().clone();
        if matches!(v.phase(), Phase::Starting | Phase::HeadReady) {
            let missing: Vec<&String> = shared2.spec.nodes.iter().filter(|n| !v.ready_nodes.contains(n)).collect();
            let msg = format!(
                "only {} of the {} required nodes joined within the start-up timeout ({} s); missing: {:?}",
                v.ready_nodes.len(),
                shared2.spec.min_nodes(),
                shared2.spec.config.startup_timeout,
                missing
            );
            publish(&shared2, |v| {
                v.set_phase(Phase::Failed);
                v.message = msg;
            });
        }
    });
    watch_own_ray(shared, events).await
}

/// Starts this node's Ray with the cluster's token, which is also written to
/// `ray_token` (0600, in the user's 0700 job dir) for the user's own tools.
async fn start_ray(shared: &Shared, args: &[String]) -> Result<(), String> {
    let token = shared.view.borrow().ray_token.clone();
    if token.is_empty() {
        return Err("node fault: the head sent no Ray auth token".into());
    }
    write_private(&shared.spec.job_dir.join(crate::job::RAY_TOKEN_FILE), &token)
        .map_err(|e| format!("node fault: writing the Ray token in {}: {e}", shared.spec.job_dir.display()))?;
    let mut guard = shared.ray.lock().await;
    let p = guard.as_mut().ok_or("the Ray container is gone")?;
    p.start(args, &token).await.map_err(|e| format!("the Ray container on {} did not take its arguments: {e}", shared.spec.node))
}

fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(content.as_bytes())
}

/// After start: a Ray node that dies while the job runs is reported.
async fn watch_own_ray(shared: &Shared, mut events: mpsc::Receiver<Event>) -> Result<(), String> {
    while let Some(ev) = events.recv().await {
        if matches!(ev, Event::Died | Event::Exited) {
            warn!("this node's Ray ended while the job ran");
            return Err(format!("the Ray node on {} ended while the job ran: {}", shared.spec.node, ray::log_tail(&shared.spec.job_dir, 3)));
        }
    }
    Ok(())
}

/// Head: derive the cluster's phase from its own Ray and the workers' reports.
pub async fn recompute_view(shared: &Shared) {
    if *shared.role.borrow() != Role::Head {
        return;
    }
    let reports = shared.reports.lock().await.clone();
    let spec = &shared.spec;
    publish(shared, |v| {
        if matches!(v.phase(), Phase::Failed | Phase::Starting) {
            return;
        }
        let mut ready = vec![spec.node.clone()];
        ready.extend(reports.iter().filter(|(_, r)| r.is_ok()).map(|(n, _)| n.clone()));
        ready.sort_by_key(|n| spec.nodes.iter().position(|x| x == n));
        let failed: Vec<String> = reports.iter().filter_map(|(n, r)| r.as_ref().err().map(|m| format!("{n}: {m}"))).collect();
        v.ready_nodes = ready;
        if v.ready_nodes.len() >= spec.min_nodes() {
            v.set_phase(Phase::Ready);
        } else if spec.nodes.len() - failed.len() < spec.min_nodes() {
            v.set_phase(Phase::Failed);
            v.message = failed.join("; ");
        }
    });
}

async fn worker(
    shared: &Arc<Shared>,
    ip: IpAddr,
    mut head: MeshClient<Channel>,
    head_node: String,
    prepared: Prepared,
) -> Result<(), String> {
    let spec = &shared.spec;
    let report = |ok: bool, message: String| {
        authed(shared, NodeReport { job_id: spec.job_id, node: spec.node.clone(), ok, message })
    };
    let (mut events, mut ports) = match prepared {
        Ok(p) => p,
        Err(m) => {
            let _ = head.report(report(false, m.clone())).await;
            return Err(m);
        }
    };
    let req = authed(shared, WatchRequest { job_id: spec.job_id, node: spec.node.clone() });
    let mut stream = head
        .watch(req)
        .await
        .map_err(|e| format!("cannot watch the head node {head_node}: {}", e.message()))?
        .into_inner();
    // `ray start` was sent / this node's Ray joined / restarts so far.
    let (mut sent, mut joined, mut restarts) = (false, false, 0u32);
    loop {
        tokio::select! {
            msg = stream.message() => {
                let v = match msg {
                    Ok(Some(v)) => v,
                    _ => return Err(format!("lost contact with the head node {head_node}'s agent")),
                };
                let (phase, gcs) = (v.phase(), v.gcs_address.clone());
                shared.view.send_replace(v);
                sync_local(shared);
                if phase == Phase::Failed {
                    return Err(shared.view.borrow().message.clone());
                }
                if !sent && !gcs.is_empty() {
                    sent = true;
                    start_worker_ray(shared, ip, &ports).await;
                }
            }
            ev = events.recv(), if sent => {
                let failure = match ev {
                    Some(Event::LauncherReady) => continue,
                    Some(Event::Started) if !joined => {
                        joined = true;
                        info!("Ray worker joined");
                        if restarts > 0 {
                            job_notice(shared, &format!(
                                "syndeo: the Ray node on {} died while the job ran; restarted it ({restarts} of {}) and it rejoined the cluster",
                                spec.node, spec.config.ray_restarts
                            ));
                        }
                        head.report(report(true, String::new())).await.map_err(|e| e.message().to_string())?;
                        continue;
                    }
                    Some(Event::Started) => continue,
                    Some(Event::Died) | Some(Event::Exited) | None if joined && restarts < spec.config.ray_restarts => {
                        restarts += 1;
                        warn!(restarts, "this node's Ray died while the job ran: {}; restarting it", ray::log_tail(&spec.job_dir, 3));
                        if let Some(old) = shared.ray.lock().await.take() {
                            old.stop(Duration::from_secs(2)).await;
                        }
                        let (proc_, ev, p) = spawn_container(shared, ip)?;
                        shared.ray.lock().await.replace(proc_);
                        (events, ports, joined) = (ev, p, false);
                        start_worker_ray(shared, ip, &ports).await;
                        continue;
                    }
                    Some(Event::Failed(m)) => format!("Ray worker on {}: {m}", spec.node),
                    Some(Event::Died) | Some(Event::Exited) | None if joined => {
                        format!("the Ray node on {} ended while the job ran: {}", spec.node, ray::log_tail(&spec.job_dir, 3))
                    }
                    Some(Event::Died) | Some(Event::Exited) | None => {
                        format!("Ray worker on {}: the container ended early: {}", spec.node, ray::log_tail(&spec.job_dir, 4))
                    }
                };
                let _ = head.report(report(false, failure.clone())).await;
                return Err(failure);
            }
        }
    }
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

/// SIGTERM: stop this node's Ray (gracefully, then by force).
pub async fn stop(shared: &Shared) {
    let grace = Duration::from_secs(shared.spec.config.stop_grace.saturating_sub(3).max(2));
    if let Some(p) = shared.ray.lock().await.take() {
        p.stop(grace).await;
    }
}
