//! Running `syndeo-agent` from a hook: no shell, a clean environment, and a
//! bounded wait. Its stderr is drained while it runs (a chatty agent never
//! blocks on a full pipe) and kept up to a cap, for the hook's log.
//!
//! Making the pipe non-blocking is an `fcntl`, which lives in `ffi::os`; it
//! comes in as a function, so this module does not depend on `ffi`.
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::node::{Finished, RunError};

/// Kept of the agent's stderr; the rest is drained and dropped.
const MAX_KEPT: usize = 64 * 1024;

/// Makes a descriptor non-blocking (`ffi::os::set_nonblocking`).
pub type SetNonblocking = fn(RawFd);
/// Writes to a pipe without SIGPIPE (`ffi::os::write_without_sigpipe`).
pub type WriteWithoutSigpipe = fn(&mut dyn std::io::Write, &[u8]) -> std::io::Result<()>;

/// Waits at most `limit` for a spawned `child` (whose stderr is piped) to
/// exit, reading its stderr all the while. A child past its limit is killed.
pub fn finish(mut child: Child, limit: Duration, nonblocking: SetNonblocking) -> Result<Finished, RunError> {
    let mut err = child.stderr.take();
    if let Some(e) = &err {
        nonblocking(e.as_raw_fd());
    }
    let start = Instant::now();
    let mut kept = Vec::new();
    loop {
        let open = drain(err.as_mut(), &mut kept);
        if !open {
            err = None;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                drain(err.as_mut(), &mut kept);
                return Ok(Finished { status, stderr: String::from_utf8_lossy(&kept).into_owned() });
            }
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return Err(kill(child, limit)),
            Err(e) => return Err(RunError::Wait(e)),
        }
    }
}

fn kill(mut child: Child, limit: Duration) -> RunError {
    let _ = child.kill();
    let _ = child.wait();
    RunError::TimedOut(limit)
}

/// Reads what the pipe has now; false once it is closed.
fn drain(pipe: Option<&mut std::process::ChildStderr>, kept: &mut Vec<u8>) -> bool {
    let Some(pipe) = pipe else { return false };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => kept.extend_from_slice(&buf[..n.min(MAX_KEPT.saturating_sub(kept.len()))]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::os::set_nonblocking;
    use std::process::{Command, Stdio};

    fn run(mut cmd: Command, limit: Duration) -> Result<Finished, RunError> {
        finish(cmd.spawn().map_err(RunError::Spawn)?, limit, set_nonblocking)
    }

    #[test]
    fn a_child_that_writes_megabytes_to_stderr_finishes_and_its_output_is_capped() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "head -c 3000000 /dev/zero | tr '\\\\0' x >&2; echo done >&2"]).stderr(Stdio::piped());
        let f = run(cmd, Duration::from_secs(20)).unwrap();
        assert!(f.status.success());
        assert_eq!(f.stderr.len(), MAX_KEPT);
    }

    #[test]
    fn a_child_past_its_limit_is_killed() {
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("30").stderr(Stdio::piped());
        let t = Instant::now();
        assert!(matches!(run(cmd, Duration::from_millis(200)), Err(RunError::TimedOut(_))));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
