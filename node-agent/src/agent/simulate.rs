//! Simulated nodes: the real lifecycles of N nodes' agents (election, mesh,
//! cluster view, reports) in one process, each on its own loopback address
//! (127.10.x.y), with a launcher that stands in for Ray. The mesh-scale
//! benchmark (`examples/mesh_bench.rs`) and the roles' unit tests use it;
//! it is built only with the `simulation` feature (and for unit tests).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::NodeState;
use super::launcher::Launcher;
use super::lifecycle;
use super::mesh::{counters, Mesh};
use super::state::{Role, Shared};
use crate::config::PortRange;
use crate::job::simulated_spec_of;

/// N agents started together; their job directories go when it is dropped.
pub struct Simulation {
    pub agents: Vec<Arc<Shared>>,
    dir: PathBuf,
    /// Node 0's agent (the head the election makes) on a thread of its own,
    /// if it was started so (`start_head_apart`).
    head: Option<HeadThread>,
}

/// The loopback address of simulated node `i`.
pub fn node_name(i: usize) -> String {
    format!("127.10.{}.{}", i / 250, i % 250 + 1)
}

impl Simulation {
    /// Starts `n` agents of job `job_id` under `base` (one directory per
    /// node), with mesh ports from `mesh_ports` and `launcher` for Ray, all
    /// on the caller's runtime.
    pub fn start(
        job_id: u32,
        n: usize,
        base: &Path,
        mesh_ports: PortRange,
        launcher: Arc<dyn Launcher>,
    ) -> std::io::Result<Simulation> {
        Simulation::start_with(job_id, n, base, mesh_ports, launcher, false)
    }

    /// As `start`, but node 0's agent runs on a thread of its own with its
    /// own runtime (all it spawns, its handshakes and calls served, runs
    /// there): `head_cpu` is then the head's own CPU time.
    pub fn start_head_apart(
        job_id: u32,
        n: usize,
        base: &Path,
        mesh_ports: PortRange,
        launcher: Arc<dyn Launcher>,
    ) -> std::io::Result<Simulation> {
        Simulation::start_with(job_id, n, base, mesh_ports, launcher, true)
    }

    fn start_with(
        job_id: u32,
        n: usize,
        base: &Path,
        mesh_ports: PortRange,
        launcher: Arc<dyn Launcher>,
        head_apart: bool,
    ) -> std::io::Result<Simulation> {
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
            let mesh = Mesh::new(&spec, &"b".repeat(64), None).map_err(std::io::Error::other)?;
            agents.push((Arc::new(Shared::new(spec, launcher.clone())), Arc::new(mesh)));
        }
        let mut head = None;
        for (i, (a, mesh)) in agents.iter().enumerate() {
            if i == 0 && head_apart {
                head = Some(HeadThread::start(a.clone(), mesh.clone())?);
            } else {
                tokio::spawn(lifecycle::run(a.clone(), mesh.clone()));
            }
        }
        let agents = agents.into_iter().map(|(a, _)| a).collect();
        Ok(Simulation { agents, dir, head })
    }

    /// The CPU time (user and system) of the head's thread so far; None
    /// unless node 0 has one (`start_head_apart`) and is the head.
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
}

impl Simulation {
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

/// One agent on threads of its own: a runtime of its own, with two workers
/// as the others' (a real head has a machine to itself), whose threads'
/// CPU time is its own.
struct HeadThread {
    tids: Arc<std::sync::Mutex<Vec<i32>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeadThread {
    fn start(shared: Arc<Shared>, mesh: Arc<Mesh>) -> std::io::Result<HeadThread> {
        let tids = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = tids.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("simulated-head")
            .on_thread_start(move || seen.lock().expect("not poisoned").push(nix::unistd::gettid().as_raw()))
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("simulated-head".into()).spawn(move || {
            rt.block_on(async {
                tokio::select! {
                    _ = rt_spawn(lifecycle::run(shared, mesh)) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(200));
        })?;
        Ok(HeadThread { tids, stop: Some(stop), thread: Some(thread) })
    }

    /// The CPU time of the runtime's threads: the first field of each one's
    /// schedstat, in ns.
    fn cpu(&self) -> Option<Duration> {
        let mut ns = 0u64;
        for tid in self.tids.lock().expect("not poisoned").iter() {
            let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
            ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(Duration::from_nanos(ns))
    }
}

/// Runs `f` as a task of the current runtime (on its workers, not on the
/// thread that blocks on it).
async fn rt_spawn(f: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = tokio::spawn(f).await;
}

impl Drop for HeadThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.head.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Mesh calls served plus cluster views streamed, in this process.
pub fn messages() -> u64 {
    counters::messages()
}

/// Starts the count of `messages` again from 0.
pub fn reset_messages() {
    counters::reset();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::IpAddr;
    use std::sync::Mutex;

    use futures::future::BoxFuture;
    use futures::FutureExt;
    use tokio::sync::mpsc;

    use super::*;
    use crate::agent::launcher::{Event, Launched, NoopLauncher, RayNode, SlurmJob};
    use crate::agent::ray::NodePorts;
    use crate::agent::state::Role;
    use crate::fault::Fault;
    use crate::job::JobSpec;
    use crate::runtime::ContainerRuntime;

    /// Like the no-op launcher, but the first Ray launched on `failing`
    /// loads, then fails `ray start`: a head whose Ray breaks before ready.
    struct FirstStartFails {
        failing: String,
        launches: Mutex<BTreeMap<String, u32>>,
    }

    struct ScriptedRay {
        tx: mpsc::Sender<Event>,
        fail: bool,
    }

    use crate::agent::ray_version::ImageRay;

    impl RayNode for ScriptedRay {
        fn loaded(&mut self) -> BoxFuture<'_, Option<ImageRay>> {
            async { Some(ImageRay::stand_in()) }.boxed()
        }

        fn start<'a>(&'a mut self, _: &'a [String], _: &'a [(String, String)]) -> BoxFuture<'a, Result<(), String>> {
            let ev = if self.fail { Event::Failed("ray start failed (simulated)".into()) } else { Event::Started };
            async move { self.tx.send(ev).await.map_err(|e| e.to_string()) }.boxed()
        }

        fn stop(self: Box<Self>, _: Duration) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
    }

    impl Launcher for FirstStartFails {
        fn launch(&self, spec: &JobSpec, _: &dyn ContainerRuntime, _: IpAddr) -> Result<Launched, Fault> {
            let n = {
                let mut l = self.launches.lock().unwrap();
                let n = l.entry(spec.node.clone()).or_default();
                *n += 1;
                *n
            };
            let (tx, events) = mpsc::channel(4);
            tx.try_send(Event::LauncherReady).unwrap();
            let fail = spec.node == self.failing && n == 1;
            Ok(Launched { ray: Box::new(ScriptedRay { tx, fail }), events, ports: NodePorts::pick(spec).unwrap() })
        }

        fn slurm_job(&self, _: u32) -> BoxFuture<'static, SlurmJob> {
            async { SlurmJob::default() }.boxed()
        }
    }

    fn ports(low: u16, high: u16) -> PortRange {
        PortRange::new(low, high).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_simulated_nodes_elect_the_first_and_all_get_ready() {
        let sim =
            Simulation::start(5101, 3, &std::env::temp_dir(), ports(47200, 47299), Arc::new(NoopLauncher)).unwrap();
        sim.ready(Instant::now(), Duration::from_secs(30)).await.unwrap();
        let roles: Vec<Role> = sim.agents.iter().map(|a| a.role.borrow().clone()).collect();
        let head = node_name(0);
        assert_eq!(roles, [Role::Head, Role::Follower(head.clone()), Role::Follower(head)]);
        assert_eq!(sim.agents[2].ready_nodes(), (0..3).map(node_name).collect::<Vec<_>>());
    }

    /// The head's Ray loads and then fails before the cluster is ready: it
    /// steps down, the others elect the next node, and it rejoins as a
    /// worker with a fresh container: the cluster is ready on all three.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_whose_ray_fails_before_ready_steps_down_and_the_others_elect_again() {
        let launcher = Arc::new(FirstStartFails { failing: node_name(0), launches: Mutex::default() });
        let sim = Simulation::start(5102, 3, &std::env::temp_dir(), ports(47300, 47399), launcher.clone()).unwrap();
        sim.ready(Instant::now(), Duration::from_secs(30)).await.unwrap();
        let next = node_name(1);
        let roles: Vec<Role> = sim.agents.iter().map(|a| a.role.borrow().clone()).collect();
        assert_eq!(roles, [Role::Follower(next.clone()), Role::Head, Role::Follower(next.clone())]);
        assert_eq!(launcher.launches.lock().unwrap()[&node_name(0)], 2, "the old head got a fresh container");
        assert_eq!(sim.agents[0].view.borrow().head_node, next);
    }
}
