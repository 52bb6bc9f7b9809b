//! `syndeo-agent prolog` (root, from the SPANK prolog on every node of a
//! syndeo job): prepares this node for the job. It checks what reached it
//! (the site configuration, the `--syndeo` value, the job's shape, the site
//! key), makes the job's directories (the runtime and shared-memory ones as
//! size-capped tmpfs mounts) and writes the job's spec and secret into
//! root's own state directory. It starts nothing: `syndeo-agent start` does,
//! from the job's extern step when Slurm has one (so that everything of the
//! job's cluster lives in the job's cgroups), or right after this.
//!
//! A user's mistake leaves a note in root's notes directory (`note.rs`),
//! which the job's steps print, and the prolog succeeds: a failed prolog
//! drains the node. Errors returned from here are node faults: the node is drained with
//! a reason that names the fault.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use syndeo_protocol::addresses::NodeAddresses;
use syndeo_protocol::env::{RLIMITS_RECORD, UMASK_RECORD};
use syndeo_protocol::image::check_image_value;
use syndeo_protocol::labels::SlurmLabels;
use syndeo_protocol::layout::JobDir;

use super::hetjob;
use super::ops::{PrologOps, System};
use super::privdrop::Identity;
use super::state::JobState;
use crate::config::Config;
use crate::job::JobSpec;
use crate::limits::JobLimits;
use crate::{alloc, gres, hostlist, node_conf, secret};
use syndeo_protocol::root::Prolog as PrologArgs;

pub fn run(a: &PrologArgs) -> Result<()> {
    mark_inherited_fds_cloexec();
    run_with(&System, a)
}

/// The prolog on `ops`: an error is a node fault, and drains the node.
pub(super) fn run_with<O: PrologOps>(ops: &O, a: &PrologArgs) -> Result<()> {
    let result = prepare(ops, a);
    if let Err(e) = &result {
        let node = ops.env("SLURMD_NODENAME").unwrap_or_default();
        if !node.is_empty() {
            ops.drain(&node, &format!("node fault in the prolog of job {}: {e:#}", a.common.job));
        }
    }
    result
}

/// Why the job cannot have a cluster on this node, when it is not the
/// node's fault: the message for the job's steps.
struct JobRefused(String);

fn prepare<O: PrologOps>(ops: &O, a: &PrologArgs) -> Result<()> {
    let id = ops.identity(a.common.uid, a.gid)?;
    let mut config = match ops.load_config(&a.common.config) {
        Ok(c) => c,
        // A broken site config must not drain every node it reaches: syndeo
        // jobs fail with the reason, other jobs run on.
        Err(e) => {
            let msg = format!("syndeo's site configuration is invalid, ask the admins to fix it: {e}");
            return refuse(ops, a, &id, &Config::default(), JobRefused(msg));
        }
    };
    if let Err(refused) = check_job(a) {
        return refuse(ops, a, &id, &config, refused);
    }
    // Under Slurm's per-job /tmp (job_container/tmpfs, namespace/tmpfs) the
    // temp dir must lie where the job's steps see it too (job_container.rs).
    match ops.node_temp_base(&config) {
        Ok(base) => config.temp_base = base,
        Err(msg) => return refuse(ops, a, &id, &config, JobRefused(msg)),
    }
    let het = match het_layout(ops, a.common.job) {
        Ok(h) => h,
        Err(refused) => return refuse(ops, a, &id, &config, refused),
    };
    let key = ops.read_site_key(&config.site_key)?;
    let spec = job_spec(ops, a, &id, config, het)?;
    let secret = secret::job_secret(&key, &spec);
    make_dirs(ops, a, &spec)?;
    make_metrics_file(ops, &spec);
    ops.save_state(&a.common.runtime_base, &JobState { spec, secret })
}

/// What the user controls about the job, checked again as root: the
/// `--syndeo` value (a value set by hand in the job's environment never
/// passed the submit-side check) and the job's shape.
fn check_job(a: &PrologArgs) -> std::result::Result<(), JobRefused> {
    if let Some(image) = &a.image {
        check_image_value(image).map_err(|m| JobRefused(m.trim_start_matches("syndeo: ").to_string()))?;
    }
    Ok(())
}

/// A heterogeneous job's layout (`hetjob.rs`), None for a plain job. What
/// goes wrong is the job's, never the node's: a user who puts two
/// components on one node is told so, and a controller that does not answer
/// fails this job only.
fn het_layout<O: PrologOps>(ops: &O, job: u32) -> std::result::Result<Option<hetjob::Layout>, JobRefused> {
    let Some(leader) = ops.env("SLURM_HET_JOB_ID").and_then(|v| v.parse::<u32>().ok()).filter(|&v| v != 0) else {
        return Ok(None);
    };
    let layout = ops
        .query_het_job(leader)
        .and_then(|text| hetjob::parse(&text, leader))
        .and_then(|components| hetjob::layout(&components, leader, job));
    match layout {
        Ok(l) => Ok(Some(l)),
        Err(hetjob::LayoutError::User(m)) => Err(JobRefused(m)),
        Err(hetjob::LayoutError::Node(m)) => Err(JobRefused(format!(
            "syndeo could not learn heterogeneous job {leader}'s nodes from Slurm's controller ({m}); \
             submit the job again, and tell the admins if it happens again"
        ))),
    }
}

/// Leaves `message` as the job's note on this node (the job's steps print it
/// and fail; the node stays in service), and in slurmd's log.
fn refuse<O: PrologOps>(ops: &O, a: &PrologArgs, id: &Identity, config: &Config, why: JobRefused) -> Result<()> {
    eprintln!("{}", why.0);
    let base = &a.common.runtime_base;
    make_runtime_dir(ops, base, a.common.job, config, id.uid, id.gid)?;
    ops.write_note(base, a.common.job, (id.uid, id.gid), &why.0)
}

/// The job's runtime directory: a fresh tmpfs of `runtime_dir_mb`, the
/// user's, mode 0700. A leftover of an earlier run of the same job id
/// (a requeued job), and its note, go first.
fn make_runtime_dir<O: PrologOps>(
    ops: &O,
    base: &Path,
    job: u32,
    config: &Config,
    uid: u32,
    gid: u32,
) -> Result<JobDir> {
    let dir = JobDir::new(base, job);
    let parent = ops.ensure_root_base(base)?;
    ops.clear_note(base, job)?;
    ops.unmount(dir.path())?;
    ops.make_job_dir(&parent, base, &job.to_string(), 0, 0)?;
    ops.mount_tmpfs(dir.path(), config.runtime_dir_mb, uid, gid, false)?;
    Ok(dir)
}

/// The runtime dir (tmpfs), the temp dir (a directory, or a tmpfs with
/// `temp_mb`) and the shared-memory dir (tmpfs), each the user's.
fn make_dirs<O: PrologOps>(ops: &O, a: &PrologArgs, spec: &JobSpec) -> Result<()> {
    let c = &spec.config;
    make_runtime_dir(ops, &a.common.runtime_base, spec.job_id, c, spec.uid, spec.gid)?;
    let name = spec.job_id.to_string();
    for (base, size_mb, exec) in [(&c.temp_base, c.temp_mb, true), (&c.shm_base, c.shm_size_mb(), true)] {
        let parent = ops.ensure_root_base(base)?;
        let dir = base.join(&name);
        ops.unmount(&dir)?;
        if size_mb == 0 {
            ops.make_job_dir(&parent, base, &name, spec.uid, spec.gid)?;
        } else {
            ops.make_job_dir(&parent, base, &name, 0, 0)?;
            ops.mount_tmpfs(&dir, size_mb, spec.uid, spec.gid, exec)?;
        }
    }
    Ok(())
}

/// The job's Prometheus file_sd file on this node, when the site wants one
/// (`metrics_sd_dir`). Monitoring never fails a job or drains a node: a file
/// that cannot be made is a line in slurmd's log, and the job runs without.
fn make_metrics_file<O: PrologOps>(ops: &O, spec: &JobSpec) {
    let dir = &spec.config.metrics_sd_dir;
    if dir.as_os_str().is_empty() {
        return;
    }
    if let Err(e) = ops.make_metrics_file(dir, spec.job_id, &spec.node, (spec.uid, spec.gid)) {
        eprintln!("job {} runs without its Prometheus target on {}: {e:#}", spec.job_id, spec.node);
    }
}

/// The job as this node sees it, from the prolog's environment (set by
/// slurmd), the plugin's arguments and the node addresses it sends on stdin.
fn job_spec<O: PrologOps>(
    ops: &O,
    a: &PrologArgs,
    id: &Identity,
    config: Config,
    het: Option<hetjob::Layout>,
) -> Result<JobSpec> {
    let env = |k: &str| {
        // The plugin passes only these: a name missing there would read as unset.
        debug_assert!(syndeo_protocol::env::JOB_SCRIPT_ENV.contains(&k), "{k} is not in JOB_SCRIPT_ENV");
        ops.env(k).filter(|v| !v.is_empty())
    };
    let node = env("SLURMD_NODENAME").ok_or_else(|| anyhow!("SLURMD_NODENAME is not set in the prolog"))?;
    let list = env("SLURM_JOB_NODELIST")
        .or_else(|| env("SLURM_NODELIST"))
        .ok_or_else(|| anyhow!("neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set in the prolog"))?;
    // This node's place among its own component's nodes (what the CPU
    // counts follow), and in the cluster's (all components' in a
    // heterogeneous job).
    let own_nodes = hostlist::expand(&list)?;
    let own_index = own_nodes
        .iter()
        .position(|n| *n == node)
        .ok_or_else(|| anyhow!("this node ({node}) is not in the job's node list {list}"))?;
    // A component's own start time may be a second off its leader's: every
    // component's secret takes the leader's (hetjob.rs).
    let own_start = env("SLURM_JOB_START_TIME").and_then(|v| v.parse().ok()).unwrap_or(0);
    let (cluster_id, het_group, nodes, start_time) = match het {
        Some(h) => (h.cluster_id, h.offset, h.nodes, h.start_time),
        None => (a.common.job, 0, own_nodes, own_start),
    };
    let index = nodes.iter().position(|n| *n == node).ok_or_else(|| anyhow!("{node} is not in the cluster's nodes"))?;
    let cpus = env("SLURM_JOB_CPUS_PER_NODE")
        .map(|s| alloc::cpus_per_node(&s))
        .transpose()?
        .and_then(|v| v.get(own_index).copied())
        .unwrap_or(1);
    let gpus = alloc::gpu_ids(env("SLURM_JOB_GPUS").or_else(|| env("CUDA_VISIBLE_DEVICES")).as_deref());
    let gres_conf = ops.read_text(&gres::gres_conf_path(env("SLURM_CONF").as_deref()));
    let gpu_devices = gres::gpu_devices(&gres_conf, &node, &gpus);
    let slurm_conf = crate::slurm_conf::path(env("SLURM_CONF").as_deref());
    let labels = node_labels(&node, env("SLURM_JOB_PARTITION"), het_group, &gpus, &gres_conf, &slurm_conf);
    let addrs = node_addrs(&ops.node_addresses()?, &nodes, || node_conf::read_node_addrs(&slurm_conf))?;
    let propagate: Vec<&str> = a.propagate.iter().map(String::as_str).collect();
    let (rlimits, umask) = (format!("SPANK_{RLIMITS_RECORD}"), format!("SPANK_{UMASK_RECORD}"));
    let limits = JobLimits::parse(env(&rlimits).as_deref(), env(&umask).as_deref(), &propagate);
    let job = a.common.job.to_string();
    Ok(JobSpec {
        job_id: a.common.job,
        cluster_id,
        uid: id.uid,
        gid: id.gid,
        user: id.name.clone(),
        node,
        nodes: nodes.into(),
        addrs,
        index,
        cpus,
        gpus,
        gpu_devices,
        labels,
        image: a.image.clone(),
        workdir: env("SLURM_JOB_WORK_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/")),
        job_dir: a.common.runtime_base.join(&job),
        temp_dir: config.temp_base.join(&job),
        shm_dir: config.shm_base.join(&job),
        stderr: env("SLURM_JOB_STDERR").map(PathBuf::from).filter(|p| p.is_absolute()),
        cgroup: Default::default(),
        restart_count: env("SLURM_JOB_RESTART_COUNT").and_then(|v| v.parse().ok()).unwrap_or(0),
        start_time,
        limits,
        config,
    })
}

/// What Slurm says of this node, for its Ray labels: its name, the job's
/// partition (none when Slurm names several), its features (slurm.conf),
/// and the job's GPUs there with their type (gres.conf), and its
/// heterogeneous job component (a plain job is its own component 0).
fn node_labels(
    node: &str,
    partition: Option<String>,
    het_group: u32,
    gpus: &[String],
    gres_conf: &str,
    conf: &Path,
) -> SlurmLabels {
    SlurmLabels {
        node: node.into(),
        partition: partition.filter(|p| !p.contains(',')),
        het_group,
        features: node_conf::read_node_features(conf, node),
        gpu_count: gpus.len() as u32,
        gpu_type: gres::gpu_type(gres_conf, node, gpus),
    }
}

/// The nodes' addresses as Slurm's configuration gives them (NodeAddr): the
/// plugin looks them up inside Slurm and sends them on stdin
/// (`syndeo_protocol::addresses`) for its own component's nodes; another
/// component's come from slurm.conf's lines (`conf_addrs`, every node's
/// address from one read, called only when a node is missing from the
/// plugin's). A node neither places is reached by name.
fn node_addrs(
    text: &str,
    nodes: &[String],
    conf_addrs: impl FnOnce() -> HashMap<String, String>,
) -> Result<Vec<Option<std::net::IpAddr>>> {
    let sent = NodeAddresses::decode(text).context("the node addresses the plugin sent")?;
    let conf = if nodes.iter().all(|n| sent.get(n).is_some()) { HashMap::new() } else { conf_addrs() };
    let addr = |n: &String| sent.get(n).or_else(|| conf.get(n).map(String::as_str))?.parse().ok();
    Ok(nodes.iter().map(addr).collect())
}

/// Slurm's descriptors must not reach the user's processes.
pub fn mark_inherited_fds_cloexec() {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&fd| fd > 2).collect();
    for fd in fds {
        let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_labels_come_from_its_name_the_jobs_partition_slurm_conf_and_gres_conf() {
        let dir = std::env::temp_dir().join(format!("syndeo-prolog-labels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("slurm.conf");
        std::fs::write(&conf, "NodeName=node[1-2] Features=cpu_fast Gres=gpu:standin:2\n").unwrap();
        let gres = "Name=gpu Type=standin File=/dev/x/nvidia[7,9]\n";
        let gpus = ["1".to_string()];
        let l = node_labels("node2", Some("debug".into()), 0, &gpus, gres, &conf);
        let several = node_labels("node3", Some("debug,fast".into()), 1, &[], gres, &conf);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((l.node.as_str(), l.partition.as_deref(), l.het_group), ("node2", Some("debug"), 0));
        assert_eq!(
            (l.features, l.gpu_count, l.gpu_type.as_deref()),
            (vec!["cpu_fast".to_string()], 1, Some("standin"))
        );
        assert_eq!((several.partition, several.features.len(), several.gpu_type), (None, 0, None));
        assert_eq!(several.het_group, 1);
    }

    #[test]
    fn slurm_conf_is_read_once_for_all_missing_nodes_and_not_when_the_plugin_sent_every_one() {
        let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| n.to_string()).collect();
        let reads = std::cell::Cell::new(0);
        let conf = || {
            reads.set(reads.get() + 1);
            [("n1", "10.9.0.1"), ("n2", "10.9.0.2"), ("n3", "10.9.0.3")]
                .into_iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect()
        };
        let got = node_addrs(r#"{"n3":"10.8.0.3"}"#, &nodes, conf).unwrap();
        let want: Vec<Option<std::net::IpAddr>> =
            ["10.9.0.1", "10.9.0.2", "10.8.0.3"].iter().map(|a| Some(a.parse().unwrap())).collect();
        assert_eq!((got, reads.get()), (want, 1), "two missing nodes, one read; the plugin's address wins");
        let all = r#"{"n1":"10.8.0.1","n2":"10.8.0.2","n3":"10.8.0.3"}"#;
        node_addrs(all, &nodes, conf).unwrap();
        assert_eq!(reads.get(), 1, "no node missing, no read");
    }
}
