//! `syndeo-agent epilog` (root, from the SPANK epilog on every node): asks
//! the job's supervisor to stop (SIGTERM: the agent stops Ray gracefully),
//! waits a bounded grace period, kills whatever of the job's is left (with
//! Slurm's cgroup plugins, Slurm already has), keeps the job's logs in its
//! work directory, unmounts the job's tmpfs mounts and removes its trees at
//! any depth. Every stage honours one deadline, 120 s from the start, well
//! inside the plugin's 150 s (the split is in `budget.rs`), so it finishes
//! in time even when the agent hung, died or was never started, and when
//! the user's own processes or mounts hang.
//!
//! What cannot be removed is named with its path, and the node is not
//! drained for it: the job's own content never takes a node out of service.
//! Only processes that survive SIGKILL are a node fault.
use anyhow::{bail, Result};

use super::budget::Budget;
use super::epilog_ops::{EpilogOps, Recorded};
use super::ops::System;
use super::state::JobState;
use crate::config::Config;
use syndeo_protocol::root::Common;

/// How a finished epilog left the node.
#[derive(Debug, PartialEq)]
pub(super) enum Cleaned {
    All,
    /// Some of the job's paths are left (named in the log): the node stays
    /// in service, and the plugin is told so (exit `NOT_CLEAN`).
    NotAll,
}

pub fn run(c: &Common) -> Result<()> {
    let budget = Budget::start();
    super::prolog::mark_inherited_fds_cloexec();
    match run_with(&System, c, &budget)? {
        Cleaned::All => Ok(()),
        Cleaned::NotAll => std::process::exit(syndeo_protocol::exit::NOT_CLEAN),
    }
}

/// The epilog on `ops`, within `budget`: an error is a node fault.
pub(super) fn run_with<O: EpilogOps>(ops: &O, c: &Common, budget: &Budget) -> Result<Cleaned> {
    let config = ops.load_config(&c.config).unwrap_or_else(|e| {
        eprintln!("{e}; cleaning up with the default paths");
        Config::default()
    });
    let recorded = ops.open_state(&c.runtime_base, c.job).unwrap_or_else(|e| {
        eprintln!("{e:#}");
        None
    });
    let (state, supervisor) = match recorded {
        Some(Recorded { state, supervisor }) => (state, supervisor),
        None => (None, None),
    };
    let session = supervisor.and_then(|r| ops.stop_supervisor(r, budget, config.stop_grace));
    let survivors = ops.kill_all(c.uid, c.job, session, budget.kill());
    if let Some(state) = &state {
        ops.save_logs(&state.spec, budget.logs());
    }
    let name = c.job.to_string();
    let mut left = Vec::new();
    let removal = budget.removal();
    // The temp base the prolog chose (job_container.rs), else the same choice again.
    let temp_base = match &state {
        Some(s) => s.spec.config.temp_base.clone(),
        None => ops.node_temp_base(&config).unwrap_or_else(|_| config.temp_base.clone()),
    };
    for base in [&c.runtime_base, &temp_base, &config.shm_base] {
        left.extend(ops.remove_job_dir(base, &name, removal));
    }
    left.extend(remove_metrics_file(ops, &config, state.as_ref(), c.job));
    if let Err(e) = ops.remove_state(&c.runtime_base, c.job) {
        left.push(format!("{}: {e:#}", syndeo_protocol::layout::state_dir(&c.runtime_base, c.job).display()));
    }
    if let Err(e) = ops.clear_note(&c.runtime_base, c.job) {
        left.push(format!("the job's note: {e:#}"));
    }
    for l in &left {
        eprintln!("not removed: {l}");
    }
    if !survivors.is_empty() {
        let shown: Vec<String> = survivors.iter().map(|&p| ops.describe(p)).collect();
        bail!("processes of job {name} survived SIGKILL: {}", shown.join(", "));
    }
    if !left.is_empty() {
        // The plugin logs "node clean" only on success; this says what is not.
        eprintln!("job {name}: {} path(s) could not be removed; the node stays in service", left.len());
        return Ok(Cleaned::NotAll);
    }
    Ok(Cleaned::All)
}

/// The job's Prometheus file on this node, whether or not its agent lived:
/// in the directory the prolog used (the job's spec), else the site's now.
fn remove_metrics_file<O: EpilogOps>(ops: &O, config: &Config, state: Option<&JobState>, job: u32) -> Vec<String> {
    let dir = state.map_or(&config.metrics_sd_dir, |s| &s.spec.config.metrics_sd_dir);
    let node = state.map(|s| s.spec.node.clone()).or_else(|| ops.env("SLURMD_NODENAME"));
    match node {
        Some(node) if !dir.as_os_str().is_empty() => match ops.remove_metrics_file(dir, job, &node) {
            Ok(()) => vec![],
            Err(e) => vec![format!("the job's metrics file in {}: {e:#}", dir.display())],
        },
        _ => vec![],
    }
}
