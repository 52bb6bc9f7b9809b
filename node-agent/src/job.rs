//! The job as one node's agent sees it: made by the root prolog from what
//! Slurm told it, kept in root's state directory, and handed to the agent in
//! a sealed memory file (it is never read back from anywhere the user can
//! write).
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use syndeo_protocol::layout::JobDir;

use crate::config::Config;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobSpec {
    /// This node's Slurm job: a heterogeneous job's component here has its
    /// own (directories, cgroups, extern step and epilog are per component).
    pub job_id: u32,
    /// The job whose one Ray cluster this node joins: a heterogeneous job's
    /// leader (all its components' nodes form one cluster; `root/hetjob.rs`),
    /// else `job_id`. What every node's agent must agree on (secret, mesh
    /// ports and calls) derives from it; see `cluster()`.
    #[serde(default)]
    pub cluster_id: u32,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    /// This node's name and its place in the job's ordered node list.
    pub node: String,
    /// Shared: the same list on a node's every copy of its spec (and, in the
    /// mesh benchmark, on all N simulated nodes').
    pub nodes: Arc<[String]>,
    /// Each node's address as Slurm knows it (NodeAddr), in `nodes`' order;
    /// None: resolve the node's name.
    #[serde(default)]
    pub addrs: Vec<Option<IpAddr>>,
    pub index: usize,
    /// The allocation on this node.
    pub cpus: u32,
    pub gpus: Vec<String>,
    /// Their device files, from Slurm's GRES configuration (`gres.rs`).
    #[serde(default)]
    pub gpu_devices: Vec<PathBuf>,
    /// What Slurm says of this node, for its Ray labels (`ray start --labels`).
    #[serde(default)]
    pub labels: syndeo_protocol::labels::SlurmLabels,
    /// The image the user asked for (None: `--syndeo` without a value).
    pub image: Option<String>,
    pub workdir: PathBuf,
    /// Runtime dir (socket, log, secrets), Ray's temp dir and /dev/shm dir.
    pub job_dir: PathBuf,
    pub temp_dir: PathBuf,
    pub shm_dir: PathBuf,
    /// The job's stderr file, for one-line notices; None if Slurm did not say.
    #[serde(default)]
    pub stderr: Option<PathBuf>,
    /// Times Slurm started this job again (requeued); with the start time,
    /// part of what the job's secret derives from, so a requeued job gets
    /// fresh secrets.
    #[serde(default)]
    pub restart_count: u32,
    /// When Slurm started the job (seconds; 0 where Slurm does not say).
    #[serde(default)]
    pub start_time: u64,
    /// What this node's job cgroup allows: read by the agent when it starts,
    /// not part of root's record.
    #[serde(skip)]
    pub cgroup: crate::cgroup::JobCgroup,
    /// The job's resource limits and umask, as its tasks get them.
    #[serde(default)]
    pub limits: crate::limits::JobLimits,
    pub config: Config,
}

/// What root hands the job's supervisor and agent: the spec and the job's
/// secret (hex), from which the mesh's keys derive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobState {
    pub spec: JobSpec,
    pub secret: String,
}

/// Names, in the supervisor's and the agent's environment, the descriptor of
/// the sealed memory file that holds the job's state (see `root/start.rs`).
pub const STATE_FD_VAR: &str = "SYNDEO_STATE_FD";

impl JobState {
    /// The job's state, from the sealed memory file root handed down.
    pub fn inherited() -> anyhow::Result<JobState> {
        use anyhow::Context;
        let fd = std::env::var(STATE_FD_VAR)
            .with_context(|| format!("{STATE_FD_VAR} is not set: only `syndeo-agent start` runs this"))?;
        let fd: i32 = fd.parse().with_context(|| format!("{STATE_FD_VAR}={fd}"))?;
        let text = std::fs::read_to_string(format!("/proc/self/fd/{fd}")).context("reading the job's state")?;
        serde_json::from_str(&text).context("the job's state")
    }
}

impl JobSpec {
    /// The job's runtime directory on this node (socket, logs, token).
    pub fn dir(&self) -> JobDir {
        JobDir::at(&self.job_dir)
    }

    /// Ray's `--temp-dir`: one level inside the job's 0700 temp dir, because
    /// Ray makes its temp dir world-writable (0777); the parent keeps other
    /// users out. Short, so Ray's socket paths stay under 107 bytes.
    pub fn ray_temp_dir(&self) -> PathBuf {
        self.temp_dir.join("ray")
    }

    /// Node `i`'s address as Slurm knows it, if it told.
    pub fn addr_of(&self, i: usize) -> Option<IpAddr> {
        self.addrs.get(i).copied().flatten()
    }

    /// Nodes that must join before the cluster counts as ready.
    pub fn min_nodes(&self) -> usize {
        match self.config.min_nodes as usize {
            0 => self.nodes.len(),
            n => n.min(self.nodes.len()),
        }
    }

    /// The image to use, or a message for the user.
    pub fn image_path(&self) -> Result<PathBuf, String> {
        match (&self.image, &self.config.default_image) {
            (Some(i), _) => Ok(i.into()),
            (None, None) => Err("--syndeo was given without an image and this site sets no default_image; \
                               use --syndeo=/path/to/image"
                .into()),
            (None, Some(d)) => Ok(d.clone()),
        }
    }

    /// The id of the job's Ray cluster (`cluster_id`; a record without one
    /// is a plain job's).
    pub fn cluster(&self) -> u32 {
        if self.cluster_id == 0 {
            self.job_id
        } else {
            self.cluster_id
        }
    }

    /// Ports this job's agents may listen on, in the order peers try them.
    /// Derived from the cluster's id, so every node computes the same list.
    pub fn mesh_ports(&self) -> Vec<u16> {
        mesh_ports(self.cluster(), self.config.mesh_ports.bounds())
    }
}

/// A job spec for simulated nodes (unit tests, the mesh benchmark): `nodes`
/// in list order, this node at `index`, and the site's defaults.
#[cfg(any(test, feature = "simulation"))]
pub fn simulated_spec(job_id: u32, nodes: &[&str], index: usize) -> JobSpec {
    simulated_spec_of(job_id, nodes.iter().map(|n| n.to_string()).collect(), index)
}

/// `simulated_spec` for a list shared by all the job's simulated nodes (the
/// mesh benchmark's: N copies of N names would be O(N²) memory).
#[cfg(any(test, feature = "simulation"))]
pub fn simulated_spec_of(job_id: u32, nodes: Arc<[String]>, index: usize) -> JobSpec {
    let job = job_id.to_string();
    JobSpec {
        job_id,
        cluster_id: job_id,
        uid: 1000,
        gid: 1000,
        user: "u".into(),
        node: nodes[index].clone(),
        nodes: nodes.clone(),
        addrs: vec![],
        index,
        cpus: 2,
        gpus: vec![],
        gpu_devices: vec![],
        labels: syndeo_protocol::labels::SlurmLabels { node: nodes[index].clone(), ..Default::default() },
        image: Some("/img".into()),
        workdir: "/home/u".into(),
        job_dir: PathBuf::from("/run/syndeo").join(&job),
        temp_dir: PathBuf::from("/tmp/syndeo").join(&job),
        shm_dir: PathBuf::from("/run/syndeo-shm").join(&job),
        stderr: None,
        cgroup: Default::default(),
        restart_count: 0,
        start_time: 0,
        limits: Default::default(),
        config: Config::default(),
    }
}

/// Candidate mesh ports per job: the first free one is bound.
pub const MESH_CANDIDATES: usize = 16;

pub fn mesh_ports(job_id: u32, (lo, hi): (u16, u16)) -> Vec<u16> {
    let size = (hi - lo) as u64 + 1;
    let mut out: Vec<u16> = Vec::new();
    let mut k = 0u64;
    while out.len() < MESH_CANDIDATES.min(size as usize) {
        let p = lo + ((job_id as u64).wrapping_mul(2654435761).wrapping_add(k * 7919) % size) as u16;
        if !out.contains(&p) {
            out.push(p);
        }
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_ports_are_distinct_in_range_and_stable() {
        let p = mesh_ports(1234, (600, 999));
        assert_eq!(p.len(), MESH_CANDIDATES);
        assert!(p.iter().all(|&x| (600..=999).contains(&x)));
        let mut d = p.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), MESH_CANDIDATES);
        assert_eq!(p, mesh_ports(1234, (600, 999)));
        assert_ne!(p, mesh_ports(1235, (600, 999)));
    }

    #[test]
    fn ray_temp_dir_is_inside_the_private_temp_dir_and_short() {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "job_id": 4294967295u32, "uid": 1, "gid": 1, "user": "u", "node": "n", "nodes": ["n"], "index": 0,
            "cpus": 1, "gpus": [], "image": null, "workdir": "/", "job_dir": "/run/syndeo/4294967295",
            "temp_dir": "/tmp/syndeo/4294967295", "shm_dir": "/run/syndeo-shm/4294967295", "config": Config::default()
        }))
        .unwrap();
        let ray = spec.ray_temp_dir();
        assert!(ray.starts_with(&spec.temp_dir) && ray != spec.temp_dir);
        // Ray adds "/session_YYYY-MM-DD_HH-MM-SS_UUUUUU_PPPPPPP/sockets/plasma_store" (70 bytes).
        assert!(ray.as_os_str().len() + 70 < 107, "{}", ray.display());
    }

    #[test]
    fn tiny_port_range_gives_what_it_has() {
        assert_eq!(mesh_ports(5, (50000, 50001)).len(), 2);
    }
}
