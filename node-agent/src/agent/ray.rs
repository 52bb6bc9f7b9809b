//! Ray on this node, as data: the `ray start` arguments (every port and
//! directory per job, so two jobs on a node never collide) and the container
//! Ray runs in. Nothing here starts a process.
use std::net::IpAddr;
use std::path::Path;

use anyhow::Result;
use syndeo_protocol::env::JOB_MARKER;

use super::ports::{Holds, PortSource};
use crate::config::Bind;
use crate::job::JobSpec;
use crate::runtime::ContainerSpec;

/// A node's Ray ports, held (see `ports.rs`) until the agent ends. Ray
/// would pick the two agents' ports itself, free them and bind them later:
/// syndeo names every port Ray binds by number, and Ray's other listeners
/// (node manager, object manager, workers) bind port 0, which the kernel
/// hands out bound.
#[derive(Debug, Clone)]
pub struct NodePorts {
    pub dashboard_agent: u16,
    pub dashboard_agent_grpc: u16,
    pub runtime_env_agent: u16,
    pub metrics_export: u16,
    pub autoscaler_metrics: u16,
    pub dashboard_metrics: u16,
    /// The holders of these ports and of the head's.
    pub holds: Holds,
}

impl NodePorts {
    /// Ports for this node's Ray, picked and held (see `ports.rs`).
    pub fn pick(spec: &JobSpec) -> Result<NodePorts> {
        NodePorts::pick_from(&PortSource::for_job(spec)?)
    }

    /// A simulated node's ports (the no-op launcher): the numbers a node
    /// whose ports are all free would pick, without holders. Simulated nodes
    /// share one host's ports, where each node's holders would make every
    /// later node's pick scan past all of them (O(N) binds per node, O(N²)
    /// in all: 30 s of the mesh benchmark at 1,024 nodes), a cost no real
    /// node has (its port space is its own); and no Ray binds them here.
    #[cfg(any(test, feature = "simulation"))]
    pub fn unheld(spec: &JobSpec) -> Result<NodePorts> {
        let p = PortSource::for_job(spec)?.first(6);
        Ok(NodePorts {
            dashboard_agent: p[0],
            dashboard_agent_grpc: p[1],
            runtime_env_agent: p[2],
            metrics_export: p[3],
            autoscaler_metrics: p[4],
            dashboard_metrics: p[5],
            holds: Holds::default(),
        })
    }

    fn pick_from(from: &PortSource) -> Result<NodePorts> {
        let holds = Holds::default();
        Ok(NodePorts {
            dashboard_agent: from.pick(&holds)?,
            dashboard_agent_grpc: from.pick(&holds)?,
            runtime_env_agent: from.pick(&holds)?,
            metrics_export: from.pick(&holds)?,
            autoscaler_metrics: from.pick(&holds)?,
            dashboard_metrics: from.pick(&holds)?,
            holds,
        })
    }

    /// Ray's environment for these ports (and the head's, if any): the two
    /// metrics ports Ray reads from there, and the held ports for the
    /// preload library. It travels on the launcher's stdin, never on a
    /// command line.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AUTOSCALER_METRIC_PORT".into(), self.autoscaler_metrics.to_string()),
            ("DASHBOARD_METRIC_PORT".into(), self.dashboard_metrics.to_string()),
            (syndeo_protocol::env::HELD_PORTS.into(), syndeo_protocol::env::held_ports_value(&self.holds.ports())),
        ]
    }
}

fn common_args(spec: &JobSpec, ip: IpAddr, ports: &NodePorts, memory_mb: Option<u64>) -> Vec<String> {
    let mut a: Vec<String> = [
        "--node-ip-address",
        &ip.to_string(),
        "--dashboard-agent-listen-port",
        &ports.dashboard_agent.to_string(),
        "--dashboard-agent-grpc-port",
        &ports.dashboard_agent_grpc.to_string(),
        "--runtime-env-agent-port",
        &ports.runtime_env_agent.to_string(),
        "--metrics-export-port",
        &ports.metrics_export.to_string(),
        "--min-worker-port",
        "0",
        "--max-worker-port",
        "0",
        "--num-cpus",
        &ray_cpus(spec).to_string(),
        "--num-gpus",
        &spec.gpus.len().to_string(),
        "--temp-dir",
        &spec.ray_temp_dir().to_string_lossy(),
        "--disable-usage-stats",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(crate::alloc::ray_memory_args(spec.config.object_store_mb, memory_mb));
    a.extend(["--labels".to_string(), spec.labels.to_arg()]);
    a
}

/// Ray's CPUs on this node: Slurm's allocation, or fewer when the cpuset
/// allows fewer. The cpuset alone is not the job's: without Slurm's cgroup
/// plugins it is the whole node's.
fn ray_cpus(spec: &JobSpec) -> u32 {
    spec.cgroup.cpus.map_or(spec.cpus, |c| c.min(spec.cpus))
}

/// The head's ports beside the GCS: the dashboard's (bound even when the
/// dashboard is off) and the Ray client server's (used when the image has
/// the client; the launcher drops it otherwise). Held with the node's.
#[derive(Debug, Clone, Copy)]
pub struct HeadPorts {
    pub gcs: u16,
    pub dashboard: u16,
    pub client: u16,
}

impl HeadPorts {
    /// Distinct from each other and from this node's `ports`, held with them.
    pub fn pick(spec: &JobSpec, ports: &NodePorts) -> Result<HeadPorts> {
        HeadPorts::pick_from(&PortSource::for_job(spec)?, ports)
    }

    fn pick_from(from: &PortSource, ports: &NodePorts) -> Result<HeadPorts> {
        let holds = &ports.holds;
        Ok(HeadPorts { gcs: from.pick(holds)?, dashboard: from.pick(holds)?, client: from.pick(holds)? })
    }
}

pub fn head_args(
    spec: &JobSpec,
    ip: IpAddr,
    head: &HeadPorts,
    ports: &NodePorts,
    memory_mb: Option<u64>,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["--head".into(), "--port".into(), head.gcs.to_string()];
    a.extend(["--dashboard-port".into(), head.dashboard.to_string()]);
    a.extend(["--ray-client-server-port".into(), head.client.to_string()]);
    if spec.config.dashboard {
        a.extend(["--include-dashboard".into(), "true".into(), "--dashboard-host".into(), ip.to_string()]);
    } else {
        a.extend(["--include-dashboard".into(), "false".into()]);
    }
    a.extend(common_args(spec, ip, ports, memory_mb));
    a
}

/// `args` with Ray's dashboard off: for an image whose Ray has none
/// (no `ray[default]`), where `--include-dashboard true` fails the start.
pub fn without_dashboard(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--include-dashboard" => {
                it.next();
                out.extend(["--include-dashboard".to_string(), "false".to_string()]);
            }
            "--dashboard-host" => {
                it.next();
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

pub fn worker_args(
    spec: &JobSpec,
    ip: IpAddr,
    gcs_address: &str,
    ports: &NodePorts,
    memory_mb: Option<u64>,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["--address".into(), gcs_address.into()];
    a.extend(common_args(spec, ip, ports, memory_mb));
    a
}

/// Binds shared by Ray's container and `srun --syndeo` containers.
pub fn job_binds(spec: &JobSpec, cwd: &Path) -> Vec<Bind> {
    let mut b = vec![Bind::rw(&spec.temp_dir), Bind { src: spec.shm_dir.clone(), dst: "/dev/shm".into(), ro: false }];
    for w in [&spec.workdir, &cwd.to_path_buf()] {
        if w.as_os_str() != "/" && !b.iter().any(|x| x.dst == *w) {
            b.push(Bind::rw(w));
        }
    }
    b.extend(spec.config.extra_binds.iter().cloned());
    b
}

/// Ray's pause between tries at a node-local socket (raylet, object store),
/// and how many tries: together Ray's own budget (10 tries, 1 s apart).
const SOCKET_CONNECT_PAUSE_MS: u64 = 50;
const SOCKET_CONNECT_ATTEMPTS: u64 = 200;

/// Ray's container. Its environment is on the runtime's command line, which
/// every user of the node can read: it holds no secret and no port. The auth
/// token and the ports' environment (`NodePorts::env`) go to the launcher on
/// stdin with the `ray start` arguments. `preload`: syndeo's preload library
/// in the job's temp dir, for every process of the container.
pub fn ray_container(spec: &JobSpec, image: &Path, preload: Option<&Path>) -> ContainerSpec {
    let env = [
        ("HOME", spec.temp_dir.to_string_lossy().into_owned()),
        ("USER", spec.user.clone()),
        ("LOGNAME", spec.user.clone()),
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()),
        ("LANG", "C.UTF-8".into()),
        ("RAY_AUTH_MODE", "token".into()),
        ("RAY_USAGE_STATS_ENABLED", "0".into()),
        ("CUDA_VISIBLE_DEVICES", spec.gpus.join(",")),
        (JOB_MARKER, spec.job_id.to_string()),
        ("PYTHONUNBUFFERED", "1".into()),
        // Ray's monitor writes the status `ray status` prints this often
        // (default 5 s): the cluster is Ready once it lists every node.
        ("AUTOSCALER_UPDATE_INTERVAL_S", "1".into()),
        // Workers start alongside the head and wait for its GCS this long.
        ("RAY_gcs_rpc_server_connect_timeout_s", spec.config.startup_timeout.to_string()),
        // Ray's processes reach their node's raylet and object store over Unix
        // sockets that may not listen yet, and sleep this long between tries:
        // Ray's default of 1 s is often paid whole by a starting raylet, whose
        // object manager connects to the store its own thread is still
        // opening (1.0 s between the two in raylet.out). Tried every 50 ms,
        // within Ray's budget of 10 s (SOCKET_CONNECT_ATTEMPTS).
        ("RAY_raylet_client_connect_timeout_milliseconds", SOCKET_CONNECT_PAUSE_MS.to_string()),
        ("RAY_raylet_client_num_connect_attempts", SOCKET_CONNECT_ATTEMPTS.to_string()),
    ];
    let mut env: Vec<(&str, String)> = env.into();
    env.extend(memory_monitor_env(spec.cgroup.memory_mb));
    if let Some(lib) = preload {
        env.push(("LD_PRELOAD", lib.to_string_lossy().into_owned()));
    }
    let mut binds = job_binds(spec, &spec.workdir);
    if let Some(dir) = &spec.cgroup.memory_dir {
        // Ray's memory monitor reads its own cgroup there: it sees the job's limit.
        binds.push(Bind { src: dir.clone(), dst: spec.cgroup.memory_view.clone(), ro: true });
    }
    ContainerSpec {
        image: image.into(),
        binds,
        env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        clean_env: true,
        workdir: spec.workdir.clone(),
        home: Some(spec.temp_dir.clone()),
        runtime_state: Some(spec.temp_dir.clone()),
        gpu_ids: spec.gpus.clone(),
        gpu_devices: spec.gpu_devices.clone(),
        own_pid_namespace: true,
    }
}

/// Under a cgroup memory limit, Ray's memory monitor must stop a runaway
/// task before the kernel's OOM killer does: then the driver gets Ray's
/// `OutOfMemoryError` naming the task, not a bare "worker died". Ray's
/// default (act at 95 %) leaves too little room for a task that grows by
/// hundreds of MB a second; syndeo keeps a margin of a tenth of the limit (at
/// least 192 MiB). And it looks often enough to see a task growing 1 GiB a
/// second at least four times while it crosses that margin: every margin/4
/// ms (a MiB a millisecond), between 50 ms and Ray's default of 250 ms. A
/// look costs the raylet about 0.26 ms of CPU (it reads the cgroup's and the
/// node's memory files): every 50 ms whatever the limit, the looks were
/// close to half of an idle raylet's CPU, and a third more raylet CPU per
/// task in the throughput benchmark (BENCHMARKS.md, "Where the throughput gap
/// goes"). So a job with a few GiB is looked at every 50 to 100 ms, one with
/// 10 GiB or more at Ray's pace. Without a limit, Ray's defaults stand.
pub fn memory_monitor_env(limit_mb: Option<u64>) -> Vec<(&'static str, String)> {
    let Some(limit) = limit_mb.filter(|l| *l > 0) else { return vec![] };
    let margin = (limit / 10).max(192);
    let threshold = (1.0 - margin as f64 / limit as f64).clamp(0.5, 0.95);
    let every_ms = (margin / 4).clamp(50, 250);
    vec![
        ("RAY_memory_usage_threshold", format!("{threshold:.2}")),
        ("RAY_memory_monitor_refresh_ms", every_ms.to_string()),
    ]
}

/// The last lines of this node's Ray log, for error messages.
pub fn log_tail(spec: &JobSpec, lines: usize) -> String {
    let text = std::fs::read_to_string(spec.dir().ray_log()).unwrap_or_default();
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_a_memory_limit_rays_monitor_keeps_a_margin_and_looks_four_times_while_1_gib_a_second_crosses_it() {
        assert!(memory_monitor_env(None).is_empty());
        let env = |mb| memory_monitor_env(Some(mb)).into_iter().collect::<std::collections::HashMap<_, _>>();
        assert_eq!(env(4000)["RAY_memory_usage_threshold"], "0.90");
        assert_eq!(env(1000)["RAY_memory_usage_threshold"], "0.81", "at least 192 MiB of margin");
        assert_eq!(env(200)["RAY_memory_usage_threshold"], "0.50", "never below half");
        assert_eq!(env(1500)["RAY_memory_monitor_refresh_ms"], "50", "192 MiB: four looks in 0.19 s");
        assert_eq!(env(4096)["RAY_memory_monitor_refresh_ms"], "102", "409 MiB of margin");
        assert_eq!(env(256 << 10)["RAY_memory_monitor_refresh_ms"], "250", "never slower than Ray's default");
    }

    fn spec() -> JobSpec {
        crate::job::simulated_spec(9, &["n1"], 0)
    }

    #[test]
    fn rays_local_socket_connects_retry_often_within_rays_own_ten_second_budget() {
        let cs = ray_container(&spec(), Path::new("/img"), None);
        let get = |k: &str| -> u64 {
            cs.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.parse().unwrap()).unwrap_or_else(|| panic!("{k} unset"))
        };
        let (pause, tries) =
            (get("RAY_raylet_client_connect_timeout_milliseconds"), get("RAY_raylet_client_num_connect_attempts"));
        assert!(pause <= 100, "a try every {pause} ms");
        assert!(pause * tries >= 10_000, "{tries} tries {pause} ms apart give up before Ray's default of 10 s");
    }

    #[test]
    fn ray_container_command_line_carries_no_secret_but_token_mode_is_on() {
        let cs = ray_container(&spec(), Path::new("/img"), Some(Path::new("/tmp/syndeo/9/syndeo-preload.so")));
        assert!(cs.env.iter().all(|(k, _)| !k.contains("TOKEN") && !k.contains("PORT")), "{:?}", cs.env);
        assert!(cs.env.contains(&("LD_PRELOAD".into(), "/tmp/syndeo/9/syndeo-preload.so".into())));
        assert!(cs.env.contains(&("RAY_AUTH_MODE".into(), "token".into())));
        use crate::runtime::ContainerRuntime;
        let argv = crate::runtime::Apptainer { binary: "/usr/bin/apptainer".into() }.command(&cs, &[]).unwrap();
        assert!(argv.iter().all(|a| !a.contains("TOKEN")), "{argv:?}");
    }

    fn ports() -> NodePorts {
        NodePorts {
            dashboard_agent: 1,
            dashboard_agent_grpc: 5,
            runtime_env_agent: 6,
            metrics_export: 2,
            autoscaler_metrics: 3,
            dashboard_metrics: 4,
            holds: Holds::default(),
        }
    }

    #[test]
    fn every_port_ray_would_pick_itself_is_named_and_the_metrics_ports_travel_in_the_stdin_env() {
        let a = worker_args(&spec(), "10.0.0.1".parse().unwrap(), "10.0.0.2:6379", &ports(), None);
        let has = |k: &str, v: &str| a.windows(2).any(|w| w[0] == k && w[1] == v);
        assert!(has("--dashboard-agent-grpc-port", "5") && has("--runtime-env-agent-port", "6"), "{a:?}");
        assert!(has("--min-worker-port", "0") && has("--max-worker-port", "0"), "workers bind port 0: {a:?}");
        let env = ports().env();
        assert!(env.contains(&("AUTOSCALER_METRIC_PORT".into(), "3".into())), "{env:?}");
        assert!(env.iter().any(|(k, _)| k == "SYNDEO_HELD_PORTS"), "{env:?}");
    }

    const HEAD: HeadPorts = HeadPorts { gcs: 6379, dashboard: 8265, client: 23456 };

    #[test]
    fn ray_gets_the_allocation_and_a_private_temp_dir() {
        let ports = ports();
        let a = head_args(&spec(), "10.0.0.1".parse().unwrap(), &HEAD, &ports, Some(3000));
        let has = |k: &str, v: &str| a.windows(2).any(|w| w[0] == k && w[1] == v);
        assert!(has("--num-cpus", "2") && has("--num-gpus", "0"), "{a:?}");
        assert!(has("--temp-dir", "/tmp/syndeo/9/ray"), "{a:?}");
        assert!(has("--memory", &((3000u64 - 512) * 1024 * 1024).to_string()), "{a:?}");
        assert!(has("--include-dashboard", "true") && has("--node-ip-address", "10.0.0.1"), "{a:?}");
        // Never Ray's default 10001, which every job on the node would share.
        assert!(has("--ray-client-server-port", "23456") && has("--port", "6379"), "{a:?}");
    }

    #[test]
    fn every_node_gets_slurms_facts_as_labels() {
        let mut s = spec();
        s.labels.partition = Some("debug".into());
        s.labels.features = vec!["bigmem".into()];
        let a = worker_args(&s, "10.0.0.1".parse().unwrap(), "10.0.0.2:6379", &ports(), None);
        let at = a.iter().position(|x| x == "--labels").expect("--labels");
        let labels = syndeo_protocol::labels::parse_arg(&a[at + 1]).unwrap();
        assert_eq!(labels["slurm/node"], "n1");
        assert_eq!(labels["slurm/partition"], "debug");
        assert_eq!(labels["slurm/feature.bigmem"], "true");
        let h = head_args(&s, "10.0.0.1".parse().unwrap(), &HEAD, &ports(), None);
        assert!(h.windows(2).any(|w| w[0] == "--labels" && w[1] == a[at + 1]), "{h:?}");
    }

    #[test]
    fn ray_gets_slurms_cpus_for_the_node_and_never_more_than_its_cpuset() {
        let mut s = spec();
        s.cpus = 1;
        s.cgroup.cpus = Some(2);
        assert_eq!(ray_cpus(&s), 1, "no cgroup plugins: the cpuset is the whole node's");
        s.cgroup.cpus = None;
        assert_eq!(ray_cpus(&s), 1);
        s.cpus = 4;
        s.cgroup.cpus = Some(3);
        assert_eq!(ray_cpus(&s), 3);
    }

    #[test]
    fn dashboard_is_on_by_default_bound_to_the_nodes_address_only_and_off_for_an_image_without_it() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let on = head_args(&spec(), ip, &HEAD, &ports(), None);
        assert!(on.windows(2).any(|w| w[0] == "--include-dashboard" && w[1] == "true"), "{on:?}");
        assert!(on.windows(2).any(|w| w[0] == "--dashboard-host" && w[1] == "10.0.0.1"), "{on:?}");
        assert!(!on.iter().any(|a| a == "0.0.0.0"), "{on:?}");
        let without = without_dashboard(&on);
        assert!(without.windows(2).any(|w| w[0] == "--include-dashboard" && w[1] == "false"), "{without:?}");
        assert!(!without.iter().any(|a| a == "--dashboard-host"), "{without:?}");
        assert_eq!(without.len(), on.len() - 2, "only --dashboard-host and its value go: {without:?}");
        let mut off_spec = spec();
        off_spec.config.dashboard = false;
        let off = head_args(&off_spec, ip, &HEAD, &ports(), None);
        assert!(off.windows(2).any(|w| w[0] == "--include-dashboard" && w[1] == "false"), "{off:?}");
    }
}
