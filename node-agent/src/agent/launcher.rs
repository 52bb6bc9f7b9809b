//! The seam between the agent's logic and the world: how this node's Ray
//! comes to be. [`container::ContainerLauncher`](super::container) starts the
//! real container with syndeo's launcher script; `NoopLauncher` stands in
//! for it where only the mesh and the roles matter (unit tests, and the mesh
//! simulation through the `simulation` feature, which exposes only such
//! stand-ins), and answers at once.
use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Serialize;
use tokio::sync::mpsc;

use super::ray::NodePorts;
use super::ray_version::ImageRay;
use crate::fault::Fault;
use crate::job::JobSpec;
use crate::runtime::ContainerRuntime;

/// What the launcher in the container said.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Ray is importable; it waits for the `ray start` arguments.
    LauncherReady,
    /// `ray start` returned: this node's Ray is up.
    Started,
    /// Ray could not start; why.
    Failed(String),
    /// This node's raylet ended while the job ran.
    Died,
    /// The container ended.
    Exited,
}

/// What the launcher in the container is told, once, to start this node's
/// Ray: one JSON line on its stdin (`launcher.py`, `main`), which never
/// reaches a command line of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RayStart {
    /// `ray start`'s arguments.
    pub args: Vec<String>,
    /// Added to the raylet's command line (`ray_version::raylet_args`).
    pub raylet_args: Vec<String>,
    /// Added to Ray's environment: the auth token, the ports' variables.
    pub env: std::collections::BTreeMap<String, String>,
}

impl RayStart {
    /// The line the launcher reads.
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("strings serialize") + "\n"
    }
}

/// This node's Ray, once launched: it says what the image's Ray is once it
/// loaded, takes the `ray start` arguments once, and stops (gracefully, then
/// by force after `grace`).
pub trait RayNode: Send {
    /// What the image's Ray is, once the launcher loaded it; None if the
    /// container ended first (its events tell why).
    fn loaded(&mut self) -> BoxFuture<'_, Option<ImageRay>>;
    /// `ray start` as `how` says.
    fn start<'a>(&'a mut self, how: &'a RayStart) -> BoxFuture<'a, Result<(), String>>;
    /// Head: waits (at most `limit`) until Ray's own status, read from the
    /// GCS at `gcs`, lists `nodes` nodes active; how many it listed, or why
    /// not. Stand-ins have no status to wait for.
    fn sees<'a>(&'a mut self, nodes: usize, _gcs: &'a str, _limit: Duration) -> BoxFuture<'a, Result<usize, String>> {
        async move { Ok(nodes) }.boxed()
    }
    fn stop(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()>;
}

/// A launched node: its Ray, the launcher's events, and the ports it will use.
pub struct Launched {
    pub ray: Box<dyn RayNode>,
    pub events: mpsc::Receiver<Event>,
    pub ports: NodePorts,
}

impl std::fmt::Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Launched({:?})", self.ports)
    }
}

/// What Slurm says of the job, asked once by the head.
#[derive(Debug, Default)]
pub struct SlurmJob {
    /// Memory (MiB) allocated on each node; empty when Slurm does not track it.
    pub memory_mb: std::collections::BTreeMap<String, u64>,
    /// The job's stderr file.
    pub stderr: Option<String>,
}

pub trait Launcher: Send + Sync {
    /// Checks what this node needs (the image, the work directory, the
    /// site's binds) and starts its Ray container, which loads Ray and waits.
    fn launch(&self, spec: &JobSpec, runtime: &dyn ContainerRuntime, ip: IpAddr) -> Result<Launched, Fault>;
    /// What Slurm says of the job.
    fn slurm_job(&self, job_id: u32) -> BoxFuture<'static, SlurmJob>;
}

/// Stands in for Ray: no process; ready at once, and `ray start` succeeds.
/// Its node's ports are numbers, not held (`NodePorts::unheld`).
/// For unit tests and simulated nodes only (feature `simulation`).
#[cfg(any(test, feature = "simulation"))]
pub struct NoopLauncher;

#[cfg(any(test, feature = "simulation"))]
struct NoopRay(mpsc::Sender<Event>);

#[cfg(any(test, feature = "simulation"))]
impl RayNode for NoopRay {
    fn loaded(&mut self) -> BoxFuture<'_, Option<ImageRay>> {
        async { Some(ImageRay::stand_in()) }.boxed()
    }

    fn start<'a>(&'a mut self, _: &'a RayStart) -> BoxFuture<'a, Result<(), String>> {
        async move { self.0.send(Event::Started).await.map_err(|_| "the no-op launcher is gone".to_string()) }.boxed()
    }

    fn stop(self: Box<Self>, _: Duration) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

#[cfg(any(test, feature = "simulation"))]
impl Launcher for NoopLauncher {
    fn launch(&self, spec: &JobSpec, _: &dyn ContainerRuntime, ip: IpAddr) -> Result<Launched, Fault> {
        let (tx, events) = mpsc::channel(4);
        tx.try_send(Event::LauncherReady).expect("room in a fresh channel");
        let ports = NodePorts::unheld(spec).map_err(|e| Fault::node(format!("no ports on {ip}: {e}")))?;
        Ok(Launched { ray: Box::new(NoopRay(tx)), events, ports })
    }

    fn slurm_job(&self, _: u32) -> BoxFuture<'static, SlurmJob> {
        async { SlurmJob::default() }.boxed()
    }
}

/// Parses one protocol line of the launcher script; other output is not ours.
pub fn parse_event(line: &str) -> Option<Event> {
    let (word, rest) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
    match word {
        "SYNDEO_LAUNCHER_READY" => Some(Event::LauncherReady),
        "SYNDEO_RAY_STARTED" => Some(Event::Started),
        "SYNDEO_RAY_FAILED" => Some(Event::Failed(rest.to_string())),
        "SYNDEO_RAY_DIED" => Some(Event::Died),
        _ => None,
    }
}

/// The head launcher's answer to "expect n": Ok(n listed), or why it did not.
pub fn parse_sees(line: &str) -> Option<Result<usize, String>> {
    let line = line.trim();
    if let Some(why) = line.strip_prefix("SYNDEO_RAY_SEES_LATE") {
        return Some(Err(why.trim().to_string()));
    }
    let n = line.strip_prefix("SYNDEO_RAY_SEES ")?.trim().parse().ok()?;
    Some(Ok(n))
}

/// The image's Ray as the launcher's ready line reports it.
pub fn parse_ready(line: &str) -> Option<ImageRay> {
    let json = line.trim().strip_prefix("SYNDEO_LAUNCHER_READY")?.trim();
    serde_json::from_str(json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_carries_the_images_ray_python_and_flags() {
        let line = r#"SYNDEO_LAUNCHER_READY {"ray": "2.40.0", "python": "3.11.2", "flags": ["--port", "--head"]}"#;
        assert_eq!(parse_event(line), Some(Event::LauncherReady));
        let found = parse_ready(line).unwrap();
        assert_eq!((found.ray.as_str(), found.python.as_str()), ("2.40.0", "3.11.2"));
        assert!(found.flags.unwrap().contains("--port"));
        assert_eq!(parse_ready("SYNDEO_LAUNCHER_READY"), None);
    }

    #[test]
    fn launcher_lines_parse_and_other_output_is_ignored() {
        assert_eq!(parse_event("SYNDEO_RAY_STARTED\n"), Some(Event::Started));
        assert_eq!(parse_event("SYNDEO_RAY_FAILED no ray here"), Some(Event::Failed("no ray here".into())));
        assert_eq!(parse_event("Ray runtime started."), None);
    }

    #[test]
    fn the_heads_answer_says_how_many_nodes_ray_lists_or_why_not() {
        assert_eq!(parse_sees("SYNDEO_RAY_SEES 3\n"), Some(Ok(3)));
        assert_eq!(
            parse_sees("SYNDEO_RAY_SEES_LATE Ray's status lists 2 of 3"),
            Some(Err("Ray's status lists 2 of 3".into()))
        );
        assert_eq!(parse_sees("SYNDEO_RAY_STARTED"), None);
        assert_eq!(parse_event("SYNDEO_RAY_SEES 3"), None, "not an event of the start");
    }
}
