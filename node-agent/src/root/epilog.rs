//! `syndeo-agent epilog` (root, from the SPANK epilog on every node): asks the
//! job's agent to stop Ray (SIGTERM), waits a bounded grace period, kills
//! every process left of the job's cluster on this node, and removes the
//! job's directories. It finishes within its bound even when the agent hung
//! or died. It fails (a node fault) only if processes survive SIGKILL.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cli::EpilogArgs;
use crate::config::Config;
use crate::root::dirs::remove_in_root_base;
use crate::root::procs::{self, job_processes};
use crate::root::prolog::AGENTS_DIR;
use syndeo_protocol::env::JOB_MARKER;

pub fn run(a: &EpilogArgs) -> Result<()> {
    let c = &a.common;
    let config = Config::load(&c.config).unwrap_or_else(|e| {
        eprintln!("{e}; cleaning up with the default paths");
        Config::default()
    });
    let name = c.job.to_string();
    let record = c.runtime_base.join(AGENTS_DIR).join(&name);
    let agent = read_record(&record).filter(|(pid, start)| procs::stat(*pid).is_some_and(|s| s.start_time == *start));

    if let Some((pid, _)) = agent {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(config.stop_grace);
        while Instant::now() < deadline && procs::stat(pid).is_some_and(|s| s.start_time == agent.unwrap().1) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    let survivors = kill_all(c.uid, &name, agent.map(|(pid, _)| pid));
    for base in [&c.runtime_base, &config.temp_base, &config.shm_base] {
        if let Err(e) = remove_in_root_base(base, &name) {
            eprintln!("{e:#}");
        }
    }
    remove_in_root_base(&c.runtime_base.join(AGENTS_DIR), &name)?;
    if !survivors.is_empty() {
        bail!("processes of job {name} survived SIGKILL: {survivors:?}");
    }
    Ok(())
}

fn read_record(path: &Path) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// SIGKILLs the job's processes until none is left (at most ~10 s); returns survivors.
fn kill_all(uid: u32, job: &str, session: Option<i32>) -> Vec<i32> {
    let mut left = Vec::new();
    for _ in 0..100 {
        left = job_processes(uid, (JOB_MARKER, job), session);
        if left.is_empty() {
            break;
        }
        for &p in &left {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    left
}
