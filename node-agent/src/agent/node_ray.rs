//! This node's Ray, as the head's and the workers' parts use it: launch it
//! (through the launcher seam), start it with the cluster's token, wait for
//! its answer, stop it; and the one-line notices in the job's stderr.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;

use std::sync::atomic::Ordering;

use super::launcher::{Event, Launched, RayStart};
use super::state::{Role, Shared};
use super::{driver_hook, metrics_sd, ray, ray_version};
use crate::fault::Fault;
use syndeo_protocol::metrics::Role as MetricsRole;

/// Launches this node's Ray container (checks first); it loads Ray and
/// waits. It becomes this node's Ray; the events and ports are returned.
pub async fn launch(shared: &Shared, ip: IpAddr) -> Result<(mpsc::Receiver<Event>, ray::NodePorts), Fault> {
    let Launched { ray, events, ports } = shared.launcher.launch(&shared.spec, shared.runtime.as_ref(), ip)?;
    shared.ray.lock().await.replace(ray);
    Ok((events, ports))
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

/// The job's image as the user named it, for messages.
pub fn image_of(shared: &Shared) -> String {
    shared.spec.image_path().map(|p| p.display().to_string()).unwrap_or_else(|e| e)
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
                let tail = ray::log_tail(&shared.spec, 4);
                format!(
                    "{what} on {}: the container of image {} ended early: {tail}",
                    shared.spec.node,
                    image_of(shared)
                )
            }
        };
        return Err(StartFailure { message, loaded });
    }
}

/// Starts this node's Ray with the cluster's token, which is also written to
/// `ray_token` (0600, in the user's 0700 job dir) for the user's own tools,
/// and the environment of its held `ports` (`ports.rs`). First the image's
/// Ray must have loaded and pass `ray_version::check`; the arguments are
/// fitted to its `ray start`. A container that ended before Ray loaded gets
/// nothing: its events say why (`started`).
pub async fn start_ray(shared: &Shared, ip: IpAddr, args: &[String], ports: &ray::NodePorts) -> Result<(), Fault> {
    let token = shared.view.borrow().ray_token.clone();
    if token.is_empty() {
        return Err(Fault::node("the head sent no Ray auth token"));
    }
    let path = shared.spec.dir().ray_token();
    write_private(&path, &token).map_err(|e| Fault::node(format!("writing the Ray token {}: {e}", path.display())))?;
    let mut ray = shared.ray.lock().await;
    let node = ray.as_mut().ok_or_else(|| Fault::node("the Ray container is gone"))?;
    let Some(found) = node.loaded().await else { return Ok(()) };
    let image = image_of(shared);
    let policy = ray_version::Policy { allow_unauthenticated: shared.spec.config.allow_unauthenticated_ray };
    let warning = ray_version::check(&found, policy, &image)?;
    tell_once(shared, &shared.open_cluster_told, warning);
    tell_once(shared, &shared.no_labels_told, ray_version::labels_note(&found, &image));
    let mut args = ray_version::fit_args(args, &found, &image)?;
    let (_, left_out) = shared.spec.labels.pairs();
    if !left_out.is_empty() {
        warn!("Slurm facts Ray would refuse as node labels, left out: {}", left_out.join(" "));
    }
    if found.dashboard == Some(false) {
        args = ray::without_dashboard(&args);
    }
    if let Err(e) = driver_hook::record(&shared.spec, &found) {
        warn!("{e}");
    }
    if let Ok(mut r) = shared.image_ray.lock() {
        *r = Some(found.clone());
    }
    if found.preload != Some(true) {
        ports.holds.release();
    }
    if found.preload == Some(false) {
        let node = &shared.spec.node;
        job_notice(
            shared,
            &format!(
                "syndeo: image {image} on {node} could not load syndeo's preload library (it needs glibc), so \
                 Ray's ports there are free between their pick and Ray's bind"
            ),
        );
    }
    let mut env = ports.env();
    env.push(("RAY_AUTH_TOKEN".into(), token));
    env.extend(shared.spec.config.metrics_env());
    let raylet_args = ray_version::raylet_args(&found, ports.dashboard_agent);
    let how = RayStart { args, raylet_args, env: env.into_iter().collect() };
    node.start(&how).await.map_err(|e| {
        Fault::node(format!("the Ray container on {} did not take its arguments: {e}", shared.spec.node))
    })?;
    publish_metrics(shared, SocketAddr::new(ip, ports.metrics_export), &found);
    Ok(())
}

/// This node's Ray metrics endpoint and role into the job's Prometheus file
/// (`metrics_sd.rs`), when the site has one and the image's Ray serves
/// metrics (its metrics agent comes with `ray[default]`). Monitoring never
/// fails the job: what goes wrong is a line in the agent's log.
fn publish_metrics(shared: &Shared, target: SocketAddr, found: &ray_version::ImageRay) {
    if metrics_sd::path(&shared.spec).is_none() {
        return;
    }
    if found.dashboard == Some(false) {
        warn!("no Prometheus target on {}: the image's Ray has no metrics agent (ray[default])", shared.spec.node);
        return;
    }
    let role = if *shared.role.borrow() == Role::Head { MetricsRole::Head } else { MetricsRole::Worker };
    if let Err(e) = metrics_sd::publish(&shared.spec, role, target) {
        warn!("no Prometheus target on {}: {e}", shared.spec.node);
    }
}

/// The head says `line`, if any, once in the job's stderr (`told` remembers).
fn tell_once(shared: &Shared, told: &std::sync::atomic::AtomicBool, line: Option<String>) {
    if let Some(line) = line {
        if *shared.role.borrow() == Role::Head && !told.swap(true, Ordering::Relaxed) {
            job_notice(shared, &line);
        }
    }
}

fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(content.as_bytes())
}

/// Stops this node's Ray container, if any: gracefully, by force after `grace`.
pub async fn stop_ray(shared: &Shared, grace: Duration) {
    let ray = shared.ray.lock().await.take();
    if let Some(ray) = ray {
        ray.stop(grace).await;
        if let Err(e) = metrics_sd::withdraw(&shared.spec) {
            warn!("the Prometheus target on {} stays until the epilog: {e}", shared.spec.node);
        }
    }
}
