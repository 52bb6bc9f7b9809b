//! `syndeo-agent supervise` (started as root by `syndeo-agent start`, which
//! hands it the job's state and the mesh's socket as descriptors): first it
//! becomes the job's user for good (with the job's limits, umask and
//! oom_score_adj, not slurmd's), then it keeps the job's node agent
//! (`syndeo-agent serve`) running on this node. An agent that ends
//! without being told to (killed, crashed) is started again, at most
//! `MAX_RESTARTS` times; the new one rejoins the job's cluster as a worker,
//! so the job's steps on this node (the batch script among them) still get
//! the cluster. SIGTERM from the epilog is passed on, and the supervisor ends
//! with the agent. It is synchronous and small: it only waits for signals.
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use syndeo_protocol::layout::JobDir;

use crate::job::{JobSpec, JobState};
use crate::pidfd::Process;
use crate::root::privdrop::{drop_to, Identity};

/// Starts of the agent after the first; a node whose agent keeps dying has a
/// fault that another start will not mend.
pub const MAX_RESTARTS: u32 = 3;

/// Signals the supervisor waits for; the agent unblocks them (`unblock_for_agent`).
fn waited_signals() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGCHLD] {
        s.add(sig);
    }
    s
}

/// The agent inherits the supervisor's blocked signals across exec: it
/// unblocks them first thing, so that SIGTERM reaches its handler.
pub fn unblock_for_agent() {
    let _ = waited_signals().thread_unblock();
}

/// How one run of the agent ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// After SIGTERM: the job is ending.
    AsTold,
    /// On its own: killed or crashed; the text says how.
    Unexpectedly(String),
}

pub fn run() -> Result<()> {
    let state = JobState::inherited()?;
    let spec = &state.spec;
    let job_dir = spec.job_dir.clone();
    become_the_user(spec)?;
    // As the user: root's `start` does not enter the user's tree.
    std::env::set_current_dir(&job_dir).with_context(|| format!("entering {}", job_dir.display()))?;
    // Own session: the epilog finds the job's processes by it.
    let _ = nix::unistd::setsid();
    for problem in spec.limits.apply() {
        log(&job_dir, &format!("could not apply the job's limit {problem}"));
    }
    let image = pin_image(spec);
    let signals = waited_signals();
    // Blocked before the first start: no signal is lost between the checks.
    signals.thread_block().context("blocking signals")?;
    let mut restart: Option<(u32, String)> = None;
    loop {
        let agent = start(image.as_deref(), restart.as_ref())?;
        let how = match watch(agent, &signals)? {
            Ended::AsTold => return Ok(()),
            Ended::Unexpectedly(how) => how,
        };
        let n = restart.as_ref().map_or(1, |(n, _)| n + 1);
        if n > MAX_RESTARTS {
            log(&job_dir, &format!("the node agent {how}, and was restarted {MAX_RESTARTS} times already; giving up"));
            return Ok(());
        }
        log(&job_dir, &format!("the node agent {how}; starting it again ({n} of {MAX_RESTARTS})"));
        // A crash that repeats at once does not spin.
        std::thread::sleep(Duration::from_millis(100 * u64::from(n)));
        restart = Some((n, how));
    }
}

/// As root still: Slurm's tasks run with oom_score_adj 0 (slurmd's is often
/// -1000, which the kernel would never pick); then the drop, for good.
fn become_the_user(spec: &JobSpec) -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        std::fs::write("/proc/self/oom_score_adj", "0").context("setting oom_score_adj")?;
    }
    let id = Identity::lookup(spec.uid, spec.gid)?;
    drop_to(&id)
}

/// The image every start of the agent uses: resolved once, as the user, at
/// the job's start, so that a restart runs the same image even if the path
/// changes meanwhile. A path that does not resolve is left to the agent,
/// which reports it as the job's failure.
fn pin_image(spec: &JobSpec) -> Option<PathBuf> {
    let image = spec.image_path().ok()?;
    std::fs::canonicalize(image).ok()
}

/// A new agent from this very binary (`/proc/self/exe`: the same version,
/// even after a package upgrade replaced the file), with the descriptors.
fn start(image: Option<&Path>, restart: Option<&(u32, String)>) -> Result<Pid> {
    let mut c = Command::new("/proc/self/exe");
    c.arg0("syndeo-agent").arg("serve");
    if let Some(image) = image {
        c.arg("--image").arg(image);
    }
    if let Some((n, how)) = restart {
        c.arg("--restart").arg(n.to_string()).arg("--why").arg(how);
    }
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the node agent")?;
    Ok(Pid::from_raw(child.id() as i32))
}

/// Waits until the agent ends, passing SIGTERM (and SIGINT, SIGHUP) on. The
/// signals come through a signalfd; the wait is re-checked each second too,
/// so a SIGCHLD taken by another thread (in tests) only delays it.
fn watch(agent: Pid, signals: &SigSet) -> Result<Ended> {
    let fd = SignalFd::with_flags(signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).context("signalfd")?;
    // Our child, not reaped yet: its pidfd names it until the end.
    let handle = Process::child(agent.as_raw() as u32).context("pidfd_open for the node agent")?;
    let mut told = false;
    loop {
        match waitpid(agent, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) if told || code == 0 => return Ok(Ended::AsTold),
            Ok(WaitStatus::Exited(_, code)) => return Ok(Ended::Unexpectedly(format!("exited with status {code}"))),
            Ok(WaitStatus::Signaled(_, _, _)) if told => return Ok(Ended::AsTold),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(Ended::Unexpectedly(format!("was killed by {sig}"))),
            Ok(_) => {}
            Err(e) => return Err(e).context("waiting for the node agent"),
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("waiting for signals"),
        }
        while let Ok(Some(info)) = fd.read_signal() {
            if info.ssi_signo != Signal::SIGCHLD as u32 && !told {
                told = true;
                let _ = handle.signal(Signal::SIGTERM);
            }
        }
    }
}

/// A line in the agent's log (the job directory's agent.log).
fn log(job_dir: &Path, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(JobDir::at(job_dir).agent_log()) {
        let _ = writeln!(f, "syndeo-agent supervisor: {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real child processes: one killed by a signal, one that exits non-zero,
    /// one that exits 0 (an agent told to stop), as the supervisor sees them.
    /// The signals are blocked in this test thread only, as the supervisor
    /// blocks them; another thread may take a SIGCHLD, which only delays.
    #[test]
    #[allow(clippy::zombie_processes)] // `watch` reaps them with waitpid
    fn an_agent_that_dies_on_its_own_is_unexpected_and_one_that_exits_cleanly_is_not() {
        let signals = waited_signals();
        signals.thread_block().unwrap();
        let spawn = |script: &str| {
            let c = Command::new("/bin/sh").arg("-c").arg(script).spawn().unwrap();
            Pid::from_raw(c.id() as i32)
        };
        let killed = spawn("kill -KILL $$");
        assert_eq!(watch(killed, &signals).unwrap(), Ended::Unexpectedly("was killed by SIGKILL".into()));
        let failed = spawn("exit 3");
        assert_eq!(watch(failed, &signals).unwrap(), Ended::Unexpectedly("exited with status 3".into()));
        let clean = spawn("exit 0");
        assert_eq!(watch(clean, &signals).unwrap(), Ended::AsTold);
    }
}
