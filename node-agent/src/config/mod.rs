//! The site configuration, `/etc/syndeo/syndeo.toml` (see etc/syndeo.toml for
//! the annotated reference). Read by the root prolog, which copies the
//! resolved values into the job's spec; agents never read the file again.
//! Values with a form of their own are parsed here, once, into their types
//! (`port_range`, `bind`, `optional_path`); nothing later parses them again.
//! The rules across values (bounds, absolute paths) are in `rules`.
mod bind;
mod optional_path;
mod port_range;
mod rules;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use bind::Bind;
pub use port_range::PortRange;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Apptainer,
    Bubblewrap,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Container runtime: "apptainer" (production default) or "bubblewrap".
    pub runtime: RuntimeKind,
    /// Path of the apptainer (or singularity) binary.
    pub apptainer: PathBuf,
    /// Path of the bwrap binary.
    pub bwrap: PathBuf,
    /// Image used by `--syndeo` without `=IMAGE`; None (`""` in the file):
    /// none, the user must name one.
    #[serde(with = "optional_path")]
    pub default_image: Option<PathBuf>,
    /// When not empty, images must lie under one of these directories.
    pub allowed_image_dirs: Vec<PathBuf>,
    /// Ports the node agents listen on for each other, "LOW-HIGH": below
    /// 1024, so that root binds them for the agents and no user can squat
    /// them (net.ipv4.ip_unprivileged_port_start must stay above HIGH).
    /// A site's file must name privileged ports (checked in `parse`);
    /// simulated nodes use unprivileged ones.
    #[serde(deserialize_with = "port_range::deserialize_mesh_ports")]
    pub mesh_ports: PortRange,
    /// Ports for Ray's fixed listeners (GCS, dashboard, client server,
    /// dashboard agent, metrics), "LOW-HIGH", picked free per node. Kept out
    /// of the kernel's ephemeral range (net.ipv4.ip_local_port_range), from
    /// which no connection and no bind to port 0 can take a picked port
    /// before Ray binds it. At least 64 ports, from 1024 up.
    #[serde(deserialize_with = "port_range::deserialize_ray_ports")]
    pub ray_ports: PortRange,
    /// Seconds from job start until the cluster must be ready.
    pub startup_timeout: u64,
    /// Seconds a node waits for a lower-ranked node's agent before passing over it.
    pub head_timeout: u64,
    /// Nodes that must join for the cluster to be ready; 0: all of the job's nodes.
    pub min_nodes: u32,
    /// Start Ray's dashboard and jobs API, bound to the head node's address
    /// and protected by the cluster's token, when the image's Ray has them
    /// (`ray[default]`); an image without runs without.
    pub dashboard: bool,
    /// The network Ray uses: CIDRs or interface names, the first that
    /// matches one of a node's addresses wins (network.rs); empty: Slurm's
    /// NodeAddr.
    pub network: Vec<crate::network::NetworkRule>,
    /// Ray object store size per node, in MiB.
    pub object_store_mb: u64,
    /// Extra bind mounts, "SRC[:DST[:ro]]" in the file.
    pub extra_binds: Vec<Bind>,
    /// Root-owned parents of the per-job Ray temp dir and /dev/shm dir.
    pub temp_base: PathBuf,
    pub shm_base: PathBuf,
    /// Root-only key from which each job's secrets are derived.
    pub site_key: PathBuf,
    /// Seconds the epilog gives the agent to stop Ray gracefully (1 to 60).
    pub stop_grace: u64,
    /// Size (MiB) of each job's runtime directory, a tmpfs in the runtime
    /// base (socket, logs, Ray token).
    pub runtime_dir_mb: u64,
    /// Size (MiB) of each job's shared-memory directory, a tmpfs that is the
    /// containers' /dev/shm; 0: the object store's size plus a quarter and 128 MiB.
    pub shm_mb: u64,
    /// Size (MiB) of each job's temp dir as a tmpfs; 0: a plain directory
    /// under temp_base (put temp_base on a filesystem with quotas).
    pub temp_mb: u64,
    /// Copy each node's agent and Ray logs into the job's work directory
    /// (`syndeo-<jobid>/<node>/`) when the job ends.
    pub keep_logs: bool,
    /// Most MiB of logs kept per node (the oldest files are dropped first).
    pub logs_max_mb: u64,
    /// Times a node's agent restarts its Ray after it died while the job ran.
    pub ray_restarts: u32,
    /// Run images whose Ray predates token authentication (before 2.52):
    /// anyone who can reach the nodes can then join such a cluster and run
    /// code as its user. Off: those jobs fail, naming the versions.
    pub allow_unauthenticated_ray: bool,
    /// Root's directory of Prometheus file_sd files, one per job and node
    /// (`syndeo-<job>-<node>.json`, see `syndeo_protocol::metrics`); empty: off.
    pub metrics_sd_dir: PathBuf,
    /// Exported into Ray's environment as RAY_PROMETHEUS_HOST (the
    /// dashboard's graphs read it there); empty: not set.
    pub prometheus_host: String,
    /// Exported as RAY_GRAFANA_HOST, likewise; empty: not set.
    pub grafana_host: String,
}

/// `temp_base`'s default (see `job_container.rs` for where it moves when
/// Slurm makes /tmp private per job).
pub const DEFAULT_TEMP_BASE: &str = "/tmp/syndeo";

impl Default for Config {
    fn default() -> Self {
        Config {
            runtime: RuntimeKind::Apptainer,
            apptainer: "/usr/bin/apptainer".into(),
            bwrap: "/usr/bin/bwrap".into(),
            default_image: None,
            allowed_image_dirs: vec![],
            mesh_ports: port_range::DEFAULT_MESH_PORTS,
            ray_ports: port_range::DEFAULT_RAY_PORTS,
            startup_timeout: 300,
            head_timeout: 20,
            min_nodes: 0,
            dashboard: true,
            network: vec![],
            object_store_mb: 512,
            extra_binds: vec![],
            temp_base: DEFAULT_TEMP_BASE.into(),
            shm_base: "/run/syndeo-shm".into(),
            site_key: "/etc/syndeo/site.key".into(),
            stop_grace: 15,
            runtime_dir_mb: 64,
            shm_mb: 0,
            temp_mb: 0,
            keep_logs: true,
            logs_max_mb: 200,
            ray_restarts: 3,
            allow_unauthenticated_ray: false,
            metrics_sd_dir: PathBuf::new(),
            prometheus_host: String::new(),
            grafana_host: String::new(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let c: Config = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        rules::check(&c).map_err(invalid)?;
        Ok(c)
    }

    /// Ray's environment from `prometheus_host` and `grafana_host`, for the
    /// dashboard (on the launcher's stdin with the rest of Ray's).
    pub fn metrics_env(&self) -> Vec<(String, String)> {
        [("RAY_PROMETHEUS_HOST", &self.prometheus_host), ("RAY_GRAFANA_HOST", &self.grafana_host)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    /// The size of a job's shared-memory tmpfs (see `shm_mb`).
    pub fn shm_size_mb(&self) -> u64 {
        match self.shm_mb {
            0 => self.object_store_mb + self.object_store_mb / 4 + 128,
            n => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::parse(s, Path::new("/etc/syndeo/syndeo.toml"))
    }

    #[test]
    fn empty_file_gives_defaults_with_apptainer() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.runtime, RuntimeKind::Apptainer);
    }

    #[test]
    fn shipped_reference_config_parses() {
        let text = include_str!("../../../etc/syndeo.toml");
        parse(text).unwrap();
    }

    #[test]
    fn values_are_read() {
        let c = parse("runtime = \"bubblewrap\"\nmin_nodes = 2\nmesh_ports = \"700-710\"\n").unwrap();
        assert_eq!(c.runtime, RuntimeKind::Bubblewrap);
        assert_eq!(c.min_nodes, 2);
        assert_eq!(c.mesh_ports.bounds(), (700, 710));
    }

    #[test]
    fn unknown_key_is_an_error_naming_file_and_key() {
        let e = parse("runtme = \"bubblewrap\"").unwrap_err().to_string();
        assert!(e.contains("syndeo.toml") && e.contains("runtme"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(parse("runtime = \"docker\"").is_err());
        assert!(parse("network = [\"10.0.0.0/33\"]").is_err(), "not a CIDR");
        assert!(parse("network = [\"ib0 x\"]").is_err(), "not an interface name");
        assert_eq!(parse("network = [\"10.2.0.0/16\", \"ib0\"]").unwrap().network.len(), 2);
        assert!(parse("mesh_ports = \"9-5\"").is_err());
        assert!(parse("ray_ports = \"80-8000\"").is_err(), "privileged ports");
        assert!(parse("ray_ports = \"20000-20010\"").is_err(), "too few ports");
        assert_eq!(parse("ray_ports = \"20000-20063\"").unwrap().ray_ports.bounds(), (20000, 20063));
        let e = parse("mesh_ports = \"45000-45999\"").unwrap_err().to_string();
        assert!(e.contains("privileged"), "unprivileged mesh ports could be squatted by users: {e}");
        assert!(parse("stop_grace = 3600").unwrap_err().to_string().contains("over its limit"));
        assert!(parse("stop_grace = 0").is_err());
        assert!(parse("temp_base = \"tmp\"").is_err());
        assert!(parse("object_store_mb = 10").is_err());
        assert!(parse("extra_binds = [\"relative:/x\"]").is_err());
    }

    /// The typed keys' messages come through toml as written: key, form, value.
    #[test]
    fn bad_ports_and_binds_are_errors_naming_the_key_and_what_to_write() {
        let e = parse("mesh_ports = \"9-5\"").unwrap_err().to_string();
        assert!(e.contains("syndeo.toml: mesh_ports must be \"LOW-HIGH\"") && e.contains("\"9-5\""), "{e}");
        let e = parse("ray_ports = \"20000\"").unwrap_err().to_string();
        assert!(e.contains("ray_ports must be \"LOW-HIGH\" with 1024 <= LOW") && e.contains("\"20000\""), "{e}");
        let e = parse("extra_binds = [\"/data\", \"relative:/x\"]").unwrap_err().to_string();
        assert!(e.contains("extra_binds entry \"relative:/x\" needs absolute paths"), "{e}");
    }

    #[test]
    fn typed_keys_are_read_into_their_types_once() {
        let c = parse("default_image = \"/shared/ray.sif\"\nextra_binds = [\"/data\", \"/scratch:/s:ro\"]").unwrap();
        assert_eq!(c.default_image, Some(PathBuf::from("/shared/ray.sif")));
        assert_eq!(c.extra_binds, [Bind::rw("/data"), Bind { src: "/scratch".into(), dst: "/s".into(), ro: true }]);
        assert_eq!(parse("default_image = \"\"").unwrap().default_image, None, "empty: no default image");
    }

    /// The job's spec carries the config as JSON (root writes it, the agent
    /// reads it): the typed keys keep the file's text forms there.
    #[test]
    fn the_config_round_trips_through_json_with_the_files_forms() {
        let c = parse("default_image = \"/i.sif\"\nextra_binds = [\"/data\"]\nmesh_ports = \"700-710\"").unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!((&v["mesh_ports"], &v["ray_ports"]), (&"700-710".into(), &"20000-32767".into()));
        assert_eq!((&v["default_image"], &v["extra_binds"][0]), (&"/i.sif".into(), &"/data:/data:rw".into()));
        assert_eq!(serde_json::from_value::<Config>(v).unwrap(), c);
        let d = serde_json::to_value(Config::default()).unwrap();
        assert_eq!(d["default_image"], "");
        assert_eq!(serde_json::from_value::<Config>(d).unwrap(), Config::default());
    }

    #[test]
    fn metrics_are_off_by_default_and_their_keys_are_checked() {
        let c = parse("").unwrap();
        assert!(c.metrics_sd_dir.as_os_str().is_empty() && c.metrics_env().is_empty());
        for bad in ["\"sd\"", "\"/\"", "\"/var/lib/../etc\""] {
            assert!(parse(&format!("metrics_sd_dir = {bad}")).is_err(), "{bad}");
        }
        assert!(parse("metrics_sd_dir = \"/var/lib/syndeo-sd\"").is_ok());
        for bad in ["ftp://x", "http://", "http://a b", "prom:9090", "http://x\\n"] {
            assert!(parse(&format!("prometheus_host = \"{bad}\"")).is_err(), "{bad}");
        }
        let c = parse("prometheus_host = \"http://prom:9090\"\ngrafana_host = \"https://grafana.site\"").unwrap();
        let env = c.metrics_env();
        assert!(env.contains(&("RAY_PROMETHEUS_HOST".into(), "http://prom:9090".into())), "{env:?}");
        assert!(env.contains(&("RAY_GRAFANA_HOST".into(), "https://grafana.site".into())), "{env:?}");
    }
}
