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
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::signal::Signal;
use syndeo_protocol::env::JOB_MARKER;

use super::budget::Budget;
use super::dirs::open_dir_nofollow;
use super::remove::remove_tree_at;
use super::state::{JobState, ProcRecord, StateDir};
use super::{logs, mounts, note, procs};
use crate::config::Config;
use crate::pidfd::Process;
use syndeo_protocol::root::Common;

pub fn run(c: &Common) -> Result<()> {
    let budget = Budget::start();
    super::prolog::mark_inherited_fds_cloexec();
    let config = Config::load(&c.config).unwrap_or_else(|e| {
        eprintln!("{e}; cleaning up with the default paths");
        Config::default()
    });
    let state_dir = StateDir::open(&c.runtime_base, c.job).unwrap_or_else(|e| {
        eprintln!("{e:#}");
        None
    });
    let state = state_dir.as_ref().and_then(|d| d.load().ok());
    let supervisor = state_dir.as_ref().and_then(|d| d.supervisor()).and_then(supervisor_of);
    if let Some(s) = &supervisor {
        stop_gracefully(s, budget.grace(config.stop_grace));
    }
    let survivors = kill_all(c.uid, c.job, supervisor.as_ref().map(Process::pid), budget.kill());
    if let Some(state) = &state {
        logs::save(&state.spec, budget.logs());
    }
    let name = c.job.to_string();
    let mut left = Vec::new();
    let removal = budget.removal();
    // The temp base the prolog chose (job_container.rs), else the same choice again.
    let temp_base = match &state {
        Some(s) => s.spec.config.temp_base.clone(),
        None => crate::job_container::node_temp_base(&config).unwrap_or_else(|_| config.temp_base.clone()),
    };
    for base in [&c.runtime_base, &temp_base, &config.shm_base] {
        left.extend(remove_job_dir(base, &name, removal));
    }
    left.extend(remove_metrics_file(&config, state.as_ref(), c.job));
    if let Err(e) = StateDir::remove(&c.runtime_base, c.job) {
        left.push(format!("{}: {e:#}", syndeo_protocol::layout::state_dir(&c.runtime_base, c.job).display()));
    }
    if let Err(e) = note::clear(&c.runtime_base, c.job) {
        left.push(format!("the job's note: {e:#}"));
    }
    for l in &left {
        eprintln!("not removed: {l}");
    }
    if !survivors.is_empty() {
        let shown: Vec<String> = survivors.iter().map(|&p| procs::describe(p)).collect();
        bail!("processes of job {name} survived SIGKILL: {}", shown.join(", "));
    }
    if !left.is_empty() {
        // The plugin logs "node clean" only on success; this says what is not.
        eprintln!("job {name}: {} path(s) could not be removed; the node stays in service", left.len());
        std::process::exit(syndeo_protocol::exit::NOT_CLEAN);
    }
    Ok(())
}

/// The job's Prometheus file on this node, whether or not its agent lived:
/// in the directory the prolog used (the job's spec), else the site's now.
fn remove_metrics_file(config: &Config, state: Option<&JobState>, job: u32) -> Vec<String> {
    let dir = state.map_or(&config.metrics_sd_dir, |s| &s.spec.config.metrics_sd_dir);
    let node = state.map(|s| s.spec.node.clone()).or_else(|| std::env::var("SLURMD_NODENAME").ok());
    match node {
        Some(node) if !dir.as_os_str().is_empty() => match super::metrics_sd::remove(dir, job, &node) {
            Ok(()) => vec![],
            Err(e) => vec![format!("the job's metrics file in {}: {e:#}", dir.display())],
        },
        _ => vec![],
    }
}

/// The supervisor `start` recorded, through a pidfd, if it still runs (the
/// same PID and start time: never another process that reused its PID).
fn supervisor_of(r: ProcRecord) -> Option<Process> {
    Process::verified(r.pid, r.start_time)
}

/// SIGTERM to the supervisor (which passes it on to the agent, which stops
/// Ray), then until `deadline` for it to end.
fn stop_gracefully(supervisor: &Process, deadline: Instant) {
    if supervisor.signal(Signal::SIGTERM).is_ok() {
        supervisor.ended_by(deadline);
    }
}

/// SIGKILLs the job's processes, each through a pidfd taken with the start
/// time it was found with, until none is left or `deadline` passes; returns
/// the survivors.
fn kill_all(uid: u32, job: u32, session: Option<i32>, deadline: Instant) -> Vec<i32> {
    let job = job.to_string();
    loop {
        let left = procs::job_processes(uid, (JOB_MARKER, &job), session);
        if left.is_empty() || Instant::now() >= deadline {
            return left.iter().map(|p| p.pid).collect();
        }
        for p in &left {
            if let Some(process) = Process::verified(p.pid, p.start_time) {
                let _ = process.signal(Signal::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Unmounts `<base>/<name>` if it is a mount, and removes it, through the
/// opened base (never through a link, and nothing if the base is not root's).
/// Returns what could not be removed.
fn remove_job_dir(base: &Path, name: &str, deadline: Instant) -> Vec<String> {
    let dir = base.join(name);
    if let Err(e) = mounts::unmount(&dir) {
        return vec![format!("{}: {e:#}", dir.display())];
    }
    let parent = match open_dir_nofollow(base) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return vec![],
        Err(e) => return vec![format!("{}: {e} (not a directory of root's; removed nothing there)", base.display())],
    };
    use std::os::unix::fs::MetadataExt;
    match parent.metadata() {
        Ok(m) if m.uid() == 0 && m.mode() & 0o022 == 0 => {}
        _ => return vec![format!("{}: not root's alone; removed nothing there", base.display())],
    }
    let left = remove_tree_at(parent.as_raw_fd(), OsStr::new(name), base, deadline);
    left.failures.into_iter().map(|(p, why): (PathBuf, String)| format!("{}: {why}", p.display())).collect()
}
