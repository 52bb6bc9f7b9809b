//! Simulated nodes' unit tests: three agents elect and get ready, and a
//! head whose Ray fails before ready steps down for the next.
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::mpsc;

use node_agent::agent::launcher::{Event, Launched, NoopLauncher, RayNode, RayStart, SlurmJob};
use node_agent::agent::ray::NodePorts;
use node_agent::agent::ray_version::ImageRay;
use node_agent::fault::Fault;
use node_agent::job::JobSpec;
use node_agent::runtime::ContainerRuntime;

use super::*;

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

impl RayNode for ScriptedRay {
    fn loaded(&mut self) -> BoxFuture<'_, Option<ImageRay>> {
        async { Some(ImageRay::stand_in()) }.boxed()
    }

    fn start<'a>(&'a mut self, _: &'a RayStart) -> BoxFuture<'a, Result<(), String>> {
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
    let sim = Simulation::start(
        5101,
        3,
        &std::env::temp_dir(),
        ports(47200, 47299),
        Arc::new(NoopLauncher),
        HeadPlacement::Shared,
    )
    .unwrap();
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
    let sim =
        Simulation::start(5102, 3, &std::env::temp_dir(), ports(47300, 47399), launcher.clone(), HeadPlacement::Shared)
            .unwrap();
    sim.ready(Instant::now(), Duration::from_secs(30)).await.unwrap();
    let next = node_name(1);
    let roles: Vec<Role> = sim.agents.iter().map(|a| a.role.borrow().clone()).collect();
    assert_eq!(roles, [Role::Follower(next.clone()), Role::Head, Role::Follower(next.clone())]);
    assert_eq!(launcher.launches.lock().unwrap()[&node_name(0)], 2, "the old head got a fresh container");
    assert_eq!(sim.agents[0].view.borrow().head_node, next);
}
