//! What the epilog asks of the node (the site configuration, root's record
//! of the job, the job's processes, its logs, directories, metrics file,
//! state and note), as one trait, so that its decisions can be tested with
//! a fake (`fake_epilog_ops.rs`). The real one is `ops::System`: stopping
//! and killing through pidfds, and removing without following links, are
//! here, as they were in `epilog.rs`.
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;
use syndeo_protocol::env::JOB_MARKER;

use super::budget::Budget;
use super::dirs::open_dir_nofollow;
use super::ops::System;
use super::remove::remove_tree_at;
use super::state::{JobState, ProcRecord, StateDir};
use super::{logs, metrics_sd, mounts, note, procs};
use crate::config::{Config, ConfigError};
use crate::job::JobSpec;
use crate::pidfd::Process;

/// What root's state directory of the job held, when there was one.
#[derive(Clone)]
pub struct Recorded {
    /// The spec and secret, if they could be read.
    pub state: Option<JobState>,
    /// The supervisor `start` recorded.
    pub supervisor: Option<ProcRecord>,
}

pub trait EpilogOps {
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError>;
    /// Root's state directory of the job (`StateDir::open`): None if the
    /// prolog made none, an error if it is not root's alone.
    fn open_state(&self, runtime_base: &Path, job: u32) -> Result<Option<Recorded>>;
    /// If the recorded supervisor still runs, SIGTERMs it and waits for it
    /// until the budget's grace for `stop_grace`; returns its PID.
    fn stop_supervisor(&self, r: ProcRecord, budget: &Budget, stop_grace: u64) -> Option<i32>;
    /// SIGKILLs the job's processes until none is left or `deadline`;
    /// returns the survivors.
    fn kill_all(&self, uid: u32, job: u32, session: Option<i32>, deadline: Instant) -> Vec<i32>;
    /// A process as a line for the log (`procs::describe`).
    fn describe(&self, pid: i32) -> String;
    fn save_logs(&self, spec: &JobSpec, deadline: Instant);
    /// The temp base for this node (`job_container::node_temp_base`).
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String>;
    /// Unmounts and removes `base/name`; returns what could not be removed.
    fn remove_job_dir(&self, base: &Path, name: &str, deadline: Instant) -> Vec<String>;
    fn remove_metrics_file(&self, dir: &Path, job: u32, node: &str) -> Result<()>;
    fn remove_state(&self, runtime_base: &Path, job: u32) -> Result<()>;
    fn clear_note(&self, runtime_base: &Path, job: u32) -> Result<()>;
    /// A variable of this process's environment.
    fn env(&self, name: &str) -> Option<String>;
}

impl EpilogOps for System {
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError> {
        Config::load(path)
    }
    fn open_state(&self, runtime_base: &Path, job: u32) -> Result<Option<Recorded>> {
        let dir = StateDir::open(runtime_base, job)?;
        Ok(dir.map(|d| Recorded { state: d.load().ok(), supervisor: d.supervisor() }))
    }
    fn stop_supervisor(&self, r: ProcRecord, budget: &Budget, stop_grace: u64) -> Option<i32> {
        let supervisor = supervisor_of(r)?;
        stop_gracefully(&supervisor, budget.grace(stop_grace));
        Some(supervisor.pid())
    }
    fn kill_all(&self, uid: u32, job: u32, session: Option<i32>, deadline: Instant) -> Vec<i32> {
        kill_all(uid, job, session, deadline)
    }
    fn describe(&self, pid: i32) -> String {
        procs::describe(pid)
    }
    fn save_logs(&self, spec: &JobSpec, deadline: Instant) {
        logs::save(spec, deadline)
    }
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String> {
        crate::job_container::node_temp_base(config)
    }
    fn remove_job_dir(&self, base: &Path, name: &str, deadline: Instant) -> Vec<String> {
        remove_job_dir(base, name, deadline)
    }
    fn remove_metrics_file(&self, dir: &Path, job: u32, node: &str) -> Result<()> {
        metrics_sd::remove(dir, job, node)
    }
    fn remove_state(&self, runtime_base: &Path, job: u32) -> Result<()> {
        StateDir::remove(runtime_base, job)
    }
    fn clear_note(&self, runtime_base: &Path, job: u32) -> Result<()> {
        note::clear(runtime_base, job)
    }
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
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
