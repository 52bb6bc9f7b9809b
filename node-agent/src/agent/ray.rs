//! Ray on this node, as data: the `ray start` arguments (every port and
//! directory per job, so two jobs on a node never collide) and the container
//! Ray runs in. Nothing here starts a process.
use std::cell::Cell;
use std::net::{IpAddr, TcpListener};
use std::path::Path;

use anyhow::Result;
use syndeo_protocol::env::JOB_MARKER;
use tracing::warn;

use crate::job::JobSpec;
use crate::runtime::{Bind, ContainerSpec};

/// Ports the OS says are free now, each distinct from the others picked
/// and from `taken`. Every offered port stays held (bound) until the picking
/// is done: released one by one, the OS may hand the same port out twice,
/// and Ray refuses to start when two of its components are given one port.
struct Picker<H> {
    held: Vec<H>,
    taken: Vec<u16>,
}

impl<H> Picker<H> {
    fn new(taken: &[u16]) -> Picker<H> {
        Picker { held: Vec::new(), taken: taken.to_vec() }
    }

    /// The first offered port not taken; a taken one stays held, so it is not offered again.
    fn pick(&mut self, mut offer: impl FnMut() -> Result<(u16, H)>) -> Result<u16> {
        for _ in 0..64 {
            let (port, hold) = offer()?;
            self.held.push(hold);
            if !self.taken.contains(&port) {
                self.taken.push(port);
                return Ok(port);
            }
        }
        anyhow::bail!("the OS kept offering ports already taken")
    }
}

/// Where a job's Ray ports come from on this node: `ray_ports` less the
/// kernel's ephemeral range (whence connections and binds to port 0 take
/// ports unasked, so a picked port stays free until Ray binds it), scanned
/// from a block of the job's own, so that jobs starting together on a node
/// pick apart. When every one is held (another user squats them), the
/// kernel's picks: the job starts, with the old, short race.
struct PortSource {
    ports: Vec<u16>,
    start: usize,
    /// How far the scan went: the ports before were picked or busy.
    scanned: Cell<usize>,
}

/// Ports per job's block: a node's four and the head's three fit.
const BLOCK: usize = 8;

impl PortSource {
    fn for_job(spec: &JobSpec) -> Result<PortSource> {
        let range = spec.config.ray_port_range().map_err(anyhow::Error::msg)?;
        Ok(PortSource::new(range, ephemeral_range(), spec.job_id))
    }

    fn new((lo, hi): (u16, u16), ephemeral: Option<(u16, u16)>, job_id: u32) -> PortSource {
        let mut ports: Vec<u16> = (lo..=hi).filter(|p| !ephemeral.is_some_and(|(a, b)| (a..=b).contains(p))).collect();
        if ports.is_empty() {
            warn!(
                "ray_ports {lo}-{hi} lies inside the ephemeral range {ephemeral:?} \
                 (net.ipv4.ip_local_port_range): another process may take a picked port before Ray binds it"
            );
            ports = (lo..=hi).collect();
        }
        let blocks = (ports.len() / BLOCK).max(1);
        PortSource { start: job_id as usize % blocks * BLOCK, ports, scanned: Cell::new(0) }
    }

    /// The next free port on `ip` from where the scan stands, else the
    /// kernel's pick; held by its listener.
    fn offer(&self, ip: IpAddr) -> impl FnMut() -> Result<(u16, TcpListener)> + '_ {
        move || {
            while self.scanned.get() < self.ports.len() {
                let port = self.ports[(self.start + self.scanned.get()) % self.ports.len()];
                self.scanned.set(self.scanned.get() + 1);
                match TcpListener::bind((ip, port)) {
                    Ok(listener) => return Ok((port, listener)),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if self.scanned.replace(usize::MAX) != usize::MAX {
                warn!("every port of ray_ports is in use on {ip}; Ray gets ports the kernel picks");
            }
            let listener = TcpListener::bind((ip, 0))?;
            Ok((listener.local_addr()?.port(), listener))
        }
    }
}

/// The kernel's ephemeral port range in this network namespace.
fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

#[derive(Debug, Clone)]
pub struct NodePorts {
    pub dashboard_agent: u16,
    pub metrics_export: u16,
    pub autoscaler_metrics: u16,
    pub dashboard_metrics: u16,
}

impl NodePorts {
    /// Free ports on `ip` for this node's Ray (see `PortSource`).
    pub fn pick(ip: IpAddr, spec: &JobSpec) -> Result<NodePorts> {
        NodePorts::pick_from(ip, &PortSource::for_job(spec)?)
    }

    fn pick_from(ip: IpAddr, from: &PortSource) -> Result<NodePorts> {
        let mut p = Picker::new(&[]);
        Ok(NodePorts {
            dashboard_agent: p.pick(from.offer(ip))?,
            metrics_export: p.pick(from.offer(ip))?,
            autoscaler_metrics: p.pick(from.offer(ip))?,
            dashboard_metrics: p.pick(from.offer(ip))?,
        })
    }

    fn all(&self) -> [u16; 4] {
        [self.dashboard_agent, self.metrics_export, self.autoscaler_metrics, self.dashboard_metrics]
    }
}

fn common_args(spec: &JobSpec, ip: IpAddr, ports: &NodePorts, memory_mb: Option<u64>) -> Vec<String> {
    let mut a: Vec<String> = [
        "--node-ip-address",
        &ip.to_string(),
        "--dashboard-agent-listen-port",
        &ports.dashboard_agent.to_string(),
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
/// the client; the launcher drops it otherwise).
#[derive(Debug, Clone, Copy)]
pub struct HeadPorts {
    pub gcs: u16,
    pub dashboard: u16,
    pub client: u16,
}

impl HeadPorts {
    /// Distinct from each other and from this node's `ports`. The client
    /// server listens on loopback too: its port is free on every address.
    pub fn pick(ip: IpAddr, spec: &JobSpec, ports: &NodePorts) -> Result<HeadPorts> {
        HeadPorts::pick_from(ip, &PortSource::for_job(spec)?, ports)
    }

    fn pick_from(ip: IpAddr, from: &PortSource, ports: &NodePorts) -> Result<HeadPorts> {
        let any = IpAddr::from([0u8, 0, 0, 0]);
        let mut p = Picker::new(&ports.all());
        Ok(HeadPorts {
            gcs: p.pick(from.offer(ip))?,
            dashboard: p.pick(from.offer(ip))?,
            client: p.pick(from.offer(any))?,
        })
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
    b.extend(spec.config.extra_binds.iter().filter_map(|s| Bind::parse(s).ok()));
    b
}

/// Ray's container. Its environment is on the runtime's command line, which
/// every user of the node can read: it holds no secret. The auth token goes
/// to the launcher on stdin with the `ray start` arguments.
pub fn ray_container(spec: &JobSpec, image: &Path, ports: &NodePorts) -> ContainerSpec {
    let env = [
        ("HOME", spec.temp_dir.to_string_lossy().into_owned()),
        ("USER", spec.user.clone()),
        ("LOGNAME", spec.user.clone()),
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()),
        ("LANG", "C.UTF-8".into()),
        ("RAY_AUTH_MODE", "token".into()),
        ("RAY_USAGE_STATS_ENABLED", "0".into()),
        ("AUTOSCALER_METRIC_PORT", ports.autoscaler_metrics.to_string()),
        ("DASHBOARD_METRIC_PORT", ports.dashboard_metrics.to_string()),
        ("CUDA_VISIBLE_DEVICES", spec.gpus.join(",")),
        (JOB_MARKER, spec.job_id.to_string()),
        ("PYTHONUNBUFFERED", "1".into()),
        // Ray's monitor writes the status `ray status` prints this often
        // (default 5 s): the cluster is Ready once it lists every node.
        ("AUTOSCALER_UPDATE_INTERVAL_S", "1".into()),
        // Workers start alongside the head and wait for its GCS this long.
        ("RAY_gcs_rpc_server_connect_timeout_s", spec.config.startup_timeout.to_string()),
    ];
    let mut env: Vec<(&str, String)> = env.into();
    env.extend(memory_monitor_env(spec.cgroup.memory_mb));
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
/// defaults (act at 95 %, look every 250 ms) leave too little room for a task
/// that grows by hundreds of MB a second; syndeo keeps a margin of a tenth of
/// the limit (at least 192 MiB) and looks every 50 ms (a read of two small
/// cgroup files). Without a limit, Ray's defaults stand.
pub fn memory_monitor_env(limit_mb: Option<u64>) -> Vec<(&'static str, String)> {
    let Some(limit) = limit_mb.filter(|l| *l > 0) else { return vec![] };
    let margin = (limit / 10).max(192);
    let threshold = (1.0 - margin as f64 / limit as f64).clamp(0.5, 0.95);
    vec![("RAY_memory_usage_threshold", format!("{threshold:.2}")), ("RAY_memory_monitor_refresh_ms", "50".into())]
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
    fn a_port_offered_twice_or_already_taken_is_passed_over_and_held() {
        let mut offers = [5, 5, 9, 7].into_iter();
        let mut p: Picker<u16> = Picker::new(&[9]);
        let mut offer = || Ok(offers.next().map(|o| (o, o)).expect("offers left"));
        assert_eq!(p.pick(&mut offer).unwrap(), 5);
        assert_eq!(p.pick(&mut offer).unwrap(), 7, "5 is picked already, 9 was taken before");
        assert_eq!(p.held, [5, 5, 9, 7], "every offer is held until the picker is dropped");
    }

    #[test]
    fn the_heads_ports_differ_from_each_other_and_from_the_nodes_and_skip_busy_ones() {
        let lo = IpAddr::from([127u8, 0, 0, 1]);
        // Below the ephemeral range: no connection of the host takes one meanwhile.
        let from = PortSource::new((23100, 23299), None, 5);
        assert_eq!(from.start, 40, "job 5's block");
        let busy = TcpListener::bind((lo, 23141)).unwrap();
        let node = NodePorts::pick_from(lo, &from).unwrap();
        let head = HeadPorts::pick_from(lo, &from, &node).unwrap();
        drop(busy);
        let mut all = node.all().to_vec();
        all.extend([head.gcs, head.dashboard, head.client]);
        assert_eq!(all, [23140, 23142, 23143, 23144, 23145, 23146, 23147], "{node:?} {head:?}");
    }

    #[test]
    fn ray_ports_leave_out_the_ephemeral_range_and_jobs_start_in_blocks_of_their_own() {
        let from = PortSource::new((30000, 33999), Some((32768, 60999)), 3);
        assert_eq!((from.ports.len(), from.ports[from.ports.len() - 1]), (2768, 32767));
        assert_eq!(from.start, 24);
        assert_ne!(PortSource::new((30000, 33999), None, 4).start, PortSource::new((30000, 33999), None, 5).start);
        let inside = PortSource::new((40000, 40099), Some((32768, 60999)), 1);
        assert_eq!(inside.ports.len(), 100, "all inside: the range as it is, rather than none");
    }

    #[test]
    fn when_another_user_holds_every_port_of_ray_ports_the_kernel_picks_them() {
        let lo = IpAddr::from([127u8, 0, 0, 1]);
        let from = PortSource::new((23300, 23363), None, 2);
        let squatted: Vec<TcpListener> = (23300..=23363).filter_map(|p| TcpListener::bind((lo, p)).ok()).collect();
        assert_eq!(squatted.len(), 64, "the test's ports are free");
        let node = NodePorts::pick_from(lo, &from).unwrap();
        let head = HeadPorts::pick_from(lo, &from, &node).unwrap();
        let mut all = node.all().to_vec();
        all.extend([head.gcs, head.dashboard, head.client]);
        assert!(all.iter().all(|p| !(23300..=23363).contains(p)), "{all:?}");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 7, "{node:?} {head:?}");
    }

    #[test]
    fn under_a_memory_limit_rays_monitor_keeps_a_margin_and_looks_often() {
        assert!(memory_monitor_env(None).is_empty());
        let env = |mb| memory_monitor_env(Some(mb)).into_iter().collect::<std::collections::HashMap<_, _>>();
        assert_eq!(env(4000)["RAY_memory_usage_threshold"], "0.90");
        assert_eq!(env(1000)["RAY_memory_usage_threshold"], "0.81", "at least 192 MiB of margin");
        assert_eq!(env(200)["RAY_memory_usage_threshold"], "0.50", "never below half");
        assert_eq!(env(1000)["RAY_memory_monitor_refresh_ms"], "50");
    }

    fn spec() -> JobSpec {
        crate::job::simulated_spec(9, &["n1"], 0)
    }

    #[test]
    fn ray_container_command_line_carries_no_secret_but_token_mode_is_on() {
        let ports = NodePorts { dashboard_agent: 1, metrics_export: 2, autoscaler_metrics: 3, dashboard_metrics: 4 };
        let cs = ray_container(&spec(), Path::new("/img"), &ports);
        assert!(cs.env.iter().all(|(k, _)| !k.contains("TOKEN")), "{:?}", cs.env);
        assert!(cs.env.contains(&("RAY_AUTH_MODE".into(), "token".into())));
        use crate::runtime::ContainerRuntime;
        let argv = crate::runtime::Apptainer { binary: "/usr/bin/apptainer".into() }.command(&cs, &[]).unwrap();
        assert!(argv.iter().all(|a| !a.contains("TOKEN")), "{argv:?}");
    }

    const HEAD: HeadPorts = HeadPorts { gcs: 6379, dashboard: 8265, client: 23456 };

    #[test]
    fn ray_gets_the_allocation_and_a_private_temp_dir() {
        let ports = NodePorts { dashboard_agent: 1, metrics_export: 2, autoscaler_metrics: 3, dashboard_metrics: 4 };
        let a = head_args(&spec(), "10.0.0.1".parse().unwrap(), &HEAD, &ports, Some(3000));
        let has = |k: &str, v: &str| a.windows(2).any(|w| w[0] == k && w[1] == v);
        assert!(has("--num-cpus", "2") && has("--num-gpus", "0"), "{a:?}");
        assert!(has("--temp-dir", "/tmp/syndeo/9/ray"), "{a:?}");
        assert!(has("--memory", &((3000u64 - 512) * 1024 * 1024).to_string()), "{a:?}");
        assert!(has("--include-dashboard", "false") && has("--node-ip-address", "10.0.0.1"), "{a:?}");
        // Never Ray's default 10001, which every job on the node would share.
        assert!(has("--ray-client-server-port", "23456") && has("--port", "6379"), "{a:?}");
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
    fn dashboard_is_off_by_default_and_when_on_binds_the_nodes_address_only() {
        let ports = NodePorts { dashboard_agent: 1, metrics_export: 2, autoscaler_metrics: 3, dashboard_metrics: 4 };
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let off = head_args(&spec(), ip, &HEAD, &ports, None);
        assert!(off.windows(2).any(|w| w[0] == "--include-dashboard" && w[1] == "false"), "{off:?}");
        let mut on_spec = spec();
        on_spec.config.dashboard = true;
        let on = head_args(&on_spec, ip, &HEAD, &ports, None);
        assert!(on.windows(2).any(|w| w[0] == "--include-dashboard" && w[1] == "true"), "{on:?}");
        assert!(on.windows(2).any(|w| w[0] == "--dashboard-host" && w[1] == "10.0.0.1"), "{on:?}");
        assert!(!on.iter().any(|a| a == "0.0.0.0"), "{on:?}");
    }
}
