//! The OS calls the plugin makes beside what std offers: making a pipe
//! non-blocking, so the agent's stderr is drained while it runs (`child.rs`),
//! and writing to the agent's stdin without SIGPIPE (`system.rs`).
use std::io::Write;
use std::os::fd::RawFd;

/// Makes `fd` non-blocking; failure leaves it blocking.
pub fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor the caller owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// Writes `data` with SIGPIPE blocked in this thread (the plugin runs on
/// one): an agent that ended before reading its stdin makes the write fail
/// with EPIPE instead of killing the slurmstepd the hook runs in, which
/// Slurm takes for a failed prolog and drains the node. A SIGPIPE the write
/// raised is taken off the pending set before the mask is restored.
pub fn write_without_sigpipe(w: &mut dyn Write, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: signal-set and mask calls on local sets; the mask is restored.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let written = w.write_all(data).and_then(|()| w.flush());
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        if libc::sigismember(&old, libc::SIGPIPE) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1 {
            let none = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &none);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader's end is closed: the write fails with EPIPE and this
    /// process (the test) lives on, with no SIGPIPE left pending.
    #[test]
    fn a_write_to_a_pipe_whose_reader_is_gone_is_an_error_not_a_signal() {
        // SAFETY: SIGPIPE's default action (termination), as in slurmstepd;
        // the test harness ignores it otherwise.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let mut child = std::process::Command::new("true").stdin(std::process::Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        child.wait().unwrap();
        let err = write_without_sigpipe(&mut stdin, b"node addresses\n").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
        // SAFETY: reading this thread's pending set, then restoring the disposition.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            assert_eq!(libc::sigismember(&pending, libc::SIGPIPE), 0, "a SIGPIPE is left pending");
            libc::signal(libc::SIGPIPE, before);
        }
    }
}
