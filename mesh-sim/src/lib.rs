//! Simulated nodes: the real lifecycles of N nodes' agents (election, mesh,
//! cluster view, reports) in one process, each on its own loopback address
//! (127.10.x.y), with a launcher that stands in for Ray. Test support for
//! the mesh-scale benchmark (`examples/mesh_bench.rs`) and the roles' tests;
//! outside the agent's library, which it uses through `node_agent::agent::agent`
//! and the `simulation` feature's stand-ins.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node_agent::agent::launcher::Launcher;
use node_agent::agent::{NodeState, Role, Shared};
use node_agent::config::PortRange;
use node_agent::job::simulated_spec_of;

mod count;
mod head;

pub use count::{messages, reset_messages};
use head::HeadThread;

/// N agents started together; their job directories go when it is dropped.
pub struct Simulation {
    pub agents: Vec<Arc<Shared>>,
    dir: PathBuf,
    /// Node 0's agent (the head the election makes) on a thread of its own,
    /// if it was started so (`HeadPlacement::Apart`).
    head: Option<HeadThread>,
}

/// The loopback address of simulated node `i`.
pub fn node_name(i: usize) -> String {
    format!("127.10.{}.{}", i / 250, i % 250 + 1)
}

/// Where node 0's agent runs: with the others on the caller's runtime, or
/// apart on a thread of its own (so that its CPU time can be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadPlacement {
    Shared,
    Apart,
}

impl Simulation {
    /// Starts `n` agents of job `job_id` under `base` (one directory per
    /// node), with mesh ports from `mesh_ports` and `launcher` for Ray. With
    /// `HeadPlacement::Apart`, node 0's agent runs on a thread of its own with
    /// its own runtime (all it spawns, its handshakes and calls served, runs
    /// there): `head_cpu` is then the head's own CPU time; the others run on
    /// the caller's runtime.
    pub fn start(
        job_id: u32,
        n: usize,
        base: &Path,
        mesh_ports: PortRange,
        launcher: Arc<dyn Launcher>,
        placement: HeadPlacement,
    ) -> std::io::Result<Simulation> {
        let head_apart = placement == HeadPlacement::Apart;
        count::install();
        let dir = base.join(format!("syndeo-sim-{}-{job_id}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let names: Arc<[String]> = (0..n).map(node_name).collect();
        let mut agents = Vec::with_capacity(n);
        for i in 0..n {
            let mut spec = simulated_spec_of(job_id, names.clone(), i);
            spec.job_dir = dir.join(i.to_string());
            spec.temp_dir = spec.job_dir.clone();
            spec.config.mesh_ports = mesh_ports;
            spec.config.startup_timeout = 120;
            spec.config.head_timeout = 5;
            std::fs::create_dir_all(&spec.job_dir)?;
            let secret = "b".repeat(64);
            agents.push(node_agent::agent::agent(spec, &secret, launcher.clone()).map_err(std::io::Error::other)?);
        }
        let mut head = None;
        let mut shared = Vec::with_capacity(n);
        for (i, (a, life)) in agents.into_iter().enumerate() {
            if i == 0 && head_apart {
                head = Some(HeadThread::start(life)?);
            } else {
                tokio::spawn(life);
            }
            shared.push(a);
        }
        Ok(Simulation { agents: shared, dir, head })
    }

    /// The CPU time (user and system) of the head's thread so far; None
    /// unless node 0 has one (`HeadPlacement::Apart`) and is the head.
    pub fn head_cpu(&self) -> Option<Duration> {
        if *self.agents[0].role.borrow() != Role::Head {
            return None;
        }
        self.head.as_ref().and_then(HeadThread::cpu)
    }

    /// Waits until every agent's node is ready (Ok: how long it took) or one
    /// failed, at most `limit`.
    pub async fn ready(&self, started: Instant, limit: Duration) -> Result<Duration, String> {
        for a in &self.agents {
            let mut rx = a.node_state.subscribe();
            let settled = rx.wait_for(|s| !matches!(s, NodeState::Starting(_)));
            let state = tokio::time::timeout(limit.saturating_sub(started.elapsed()), settled)
                .await
                .map_err(|_| format!("not ready within {limit:?}: {}", self.stuck()))?
                .map_err(|e| e.to_string())?
                .clone();
            if let NodeState::Failed(e) = state {
                return Err(format!("{} failed: {e}", a.spec.node));
            }
        }
        Ok(started.elapsed())
    }

    /// The agents not ready, as many as say the same, with one's name.
    fn stuck(&self) -> String {
        let mut by_state: std::collections::BTreeMap<String, (usize, &str)> = Default::default();
        for a in &self.agents {
            let state = a.node_state.borrow().clone();
            if state != NodeState::Ready {
                let role = a.role.borrow().clone();
                let e = by_state.entry(format!("{role:?}: {state:?}")).or_insert((0, &a.spec.node));
                e.0 += 1;
            }
        }
        let each: Vec<String> = by_state.iter().map(|(s, (n, one))| format!("{n} ({one}, ...) {s}")).collect();
        each.join("; ")
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.head.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests;
