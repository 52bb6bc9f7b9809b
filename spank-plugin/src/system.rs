//! The real [`Node`]: this process's environment and files, the node
//! agent's socket (`syndeo_protocol::client`), and `syndeo-agent` run as a
//! child (`child.rs`). The start helper's hand-shake lives here: added to
//! the extern step before it starts anything, then told to go.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::WaitReply;
use syndeo_protocol::{client, handshake};

use crate::child::{self, SetNonblocking, WriteWithoutSigpipe};
use crate::node::{Finished, Node, RunError};
use crate::spank::Spank;

pub struct System<'a> {
    /// Slurm's log and its extern step, for the start helper.
    slurm: &'a dyn Spank,
    nonblocking: SetNonblocking,
    /// Every write to an agent's stdin: one that ended early must not kill
    /// the slurmstepd the hook runs in.
    write: WriteWithoutSigpipe,
}

impl<'a> System<'a> {
    pub fn new(slurm: &'a dyn Spank, nonblocking: SetNonblocking, write: WriteWithoutSigpipe) -> Self {
        System { slurm, nonblocking, write }
    }
}

impl Node for System<'_> {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn remove_env(&self, name: &str) {
        std::env::remove_var(name)
    }

    fn read(&self, path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn wait_ready(&self, dir: &JobDir, timeout: Duration) -> Result<WaitReply, String> {
        client::wait_ready(dir, timeout)
    }

    fn run(&self, mut cmd: Command, input: Option<&str>, limit: Duration) -> Result<Finished, RunError> {
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut spawned = cmd.spawn().map_err(RunError::Spawn)?;
        if let (Some(input), Some(mut stdin)) = (input, spawned.stdin.take()) {
            // An agent that stopped early does not read it: its status says why.
            let _ = (self.write)(&mut stdin, input.as_bytes());
        }
        child::finish(spawned, limit, self.nonblocking)
    }

    fn start(&self, mut cmd: Command, job: u32, adopt: bool, limit: Duration) -> Result<Finished, RunError> {
        cmd.stdin(Stdio::piped());
        if adopt {
            cmd.stdout(Stdio::piped());
        }
        let started = Instant::now();
        let mut helper = cmd.spawn().map_err(RunError::Spawn)?;
        if adopt {
            self.adopt_helper(job, &helper);
        }
        // Kept open until the supervisor is accounted: the helper waits for its end.
        let go = helper.stdin.take().map(|mut go| {
            let _ = (self.write)(&mut go, handshake::go_line().as_bytes());
            go
        });
        if let Some(said) = helper.stdout.take().map(supervisor_line) {
            if let Ok(Some(pid)) = said.recv_timeout(limit) {
                self.account_supervisor(job, &mut helper, pid);
            }
        }
        drop(go);
        let left = limit.saturating_sub(started.elapsed()).max(Duration::from_secs(1));
        child::finish(helper, left, self.nonblocking)
    }
}

impl System<'_> {
    fn adopt_helper(&self, job: u32, helper: &Child) {
        match self.slurm.adopt_into_extern_step(job, helper.id() as i32) {
            Ok(()) => {
                self.slurm.log_info(&format!("syndeo: job {job}: the node agent starts in the job's extern step"))
            }
            Err(e) => self
                .slurm
                .log_error(&format!("syndeo: job {job}: {e}; its cluster on this node runs outside the job's cgroups")),
        }
    }

    /// Slurm's accounting of the step counts the processes below a PID it is
    /// given: the supervisor's, under which the agent and Ray run. The helper,
    /// its parent, never reaps it and is still running (it waits for its stdin
    /// to close), so the PID cannot name another process that reused it.
    fn account_supervisor(&self, job: u32, helper: &mut Child, pid: i32) {
        if !matches!(helper.try_wait(), Ok(None)) {
            return self.slurm.log_error(&format!(
                "syndeo: job {job}: the start helper ended early; supervisor {pid} not accounted"
            ));
        }
        if let Err(e) = self.slurm.adopt_into_extern_step(job, pid) {
            self.slurm.log_error(&format!("syndeo: job {job}: accounting the supervisor ({pid}): {e}"));
        }
        if !matches!(helper.try_wait(), Ok(None)) {
            self.slurm
                .log_error(&format!("syndeo: job {job}: the start helper ended while process {pid} was accounted"));
        }
    }
}

/// The supervisor's PID, from the helper's `supervisor PID` line, read in a
/// thread (it ends when the helper closes its stdout, at its end at the
/// latest), so the hook waits for it with a timeout.
fn supervisor_line(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<Option<i32>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        let _ = tx.send(handshake::parse_supervisor_line(&line));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper(script: &str) -> std::process::Child {
        Command::new("/bin/sh").args(["-c", script]).stdout(Stdio::piped()).spawn().unwrap()
    }

    #[test]
    fn the_supervisor_pid_is_read_from_the_helper_with_a_timeout() {
        let mut h = helper("echo supervisor 4242; sleep 1");
        let said = supervisor_line(h.stdout.take().unwrap());
        assert_eq!(said.recv_timeout(Duration::from_secs(5)), Ok(Some(4242)));
        h.wait().unwrap();
        let mut h = helper("exit 0");
        assert_eq!(supervisor_line(h.stdout.take().unwrap()).recv_timeout(Duration::from_secs(5)), Ok(None));
        h.wait().unwrap();
        let mut h = helper("sleep 3");
        let t = Instant::now();
        assert!(supervisor_line(h.stdout.take().unwrap()).recv_timeout(Duration::from_millis(200)).is_err());
        assert!(t.elapsed() < Duration::from_secs(2));
        h.wait().unwrap();
    }
}
