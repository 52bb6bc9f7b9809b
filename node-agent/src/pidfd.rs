//! Signalling a process through a pidfd (Linux 5.3): a descriptor that names
//! one process for good, so a signal never reaches another process that
//! reused its number. A process root did not start is taken only with the
//! start time recorded when it was found (field 22 of /proc/PID/stat): the
//! pidfd is opened first and the start time checked after, so a number
//! reused in between is never taken for it.
//!
//! On a kernel without pidfds (before 5.3), the start time is checked again
//! right before each signal, which leaves a window of microseconds instead
//! of none.
//!
//! A child not yet reaped keeps its number (the kernel frees it only at the
//! wait), so `std::process::Child::kill`, which never signals a reaped
//! child, is safe as it is.
//!
//! This module holds the crate's only `unsafe`: the two system calls, which
//! neither libc's functions nor nix wrap, behind a safe API.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;

use crate::root::procs;

/// One process, for good.
#[derive(Debug)]
pub struct Process {
    /// None on a kernel without pidfds.
    fd: Option<OwnedFd>,
    pid: i32,
    start_time: u64,
}

impl Process {
    /// A child of this process that was not reaped yet (its number is its
    /// own until then).
    pub fn child(pid: u32) -> io::Result<Process> {
        let pid = i32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let fd = pidfd_open(pid)?;
        let start_time = procs::stat(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?.start_time;
        Ok(Process { fd, pid, start_time })
    }

    /// The process numbered `pid` that started at `start_time` (clock ticks
    /// since boot, /proc/PID/stat field 22), if it still runs.
    pub fn verified(pid: i32, start_time: u64) -> Option<Process> {
        let fd = pidfd_open(pid).ok()?;
        let p = Process { fd, pid, start_time };
        p.same().then_some(p)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the number still names this process.
    fn same(&self) -> bool {
        procs::stat(self.pid).is_some_and(|s| s.start_time == self.start_time)
    }

    /// Sends `sig` to this process (an error once it has ended).
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        let Some(fd) = &self.fd else {
            if !self.same() {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            return nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), sig).map_err(io::Error::from);
        };
        // SAFETY: pidfd_send_signal(pidfd, sig, info, flags) with a pidfd we
        // own, a NULL info (the kernel fills in one as for kill) and no flags;
        // no memory of ours is read or written.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether the process has ended, waiting for it until `deadline` at
    /// most (its pidfd turns readable when it ends, child of ours or not).
    pub fn ended_by(&self, deadline: Instant) -> bool {
        let Some(fd) = &self.fd else { return self.ended_by_polling(deadline) };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(n) if n > 0 => return true,
                Ok(_) if Instant::now() >= deadline => return false,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
    }

    /// Without a pidfd: /proc, every 50 ms (a zombie has ended).
    fn ended_by_polling(&self, deadline: Instant) -> bool {
        loop {
            let running = procs::stat(self.pid).is_some_and(|s| s.start_time == self.start_time && s.state != 'Z');
            if !running {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// `pidfd_open(pid, 0)`: whatever process has the number `pid` now; None on
/// a kernel without it.
fn pidfd_open(pid: i32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open(pid, flags) takes two integers and returns a new
    // descriptor or -1; no memory of ours is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOSYS) { Ok(None) } else { Err(e) };
    }
    // SAFETY: the kernel has just returned this descriptor; nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    #[test]
    fn a_child_is_signalled_through_its_pidfd_and_its_end_is_seen() {
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let p = Process::child(child.id()).unwrap();
        assert!(!p.ended_by(Instant::now() + Duration::from_millis(50)));
        p.signal(Signal::SIGKILL).unwrap();
        assert!(p.ended_by(Instant::now() + Duration::from_secs(5)));
        child.wait().unwrap();
        // Reaped: its number may be another process's now; the pidfd still
        // names the one that ended, and signals nobody.
        assert!(p.signal(Signal::SIGTERM).is_err());
    }

    #[test]
    fn a_process_is_taken_only_with_the_start_time_recorded_for_it() {
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = procs::stat(pid).unwrap().start_time;
        assert!(Process::verified(pid, start + 1).is_none(), "another start time was taken for it");
        let p = Process::verified(pid, start).expect("the process with its own start time");
        assert_eq!(p.pid(), pid);
        p.signal(Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(Process::verified(pid, start).is_none(), "an ended process was taken");
    }

    /// As on a kernel without pidfds: the start time is checked before
    /// each signal; a process whose number names another one now is spared.
    #[test]
    fn without_a_pidfd_a_signal_goes_only_to_the_process_with_the_recorded_start_time() {
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = procs::stat(pid).unwrap().start_time;
        let other = Process { fd: None, pid, start_time: start + 1 };
        assert!(other.signal(Signal::SIGKILL).is_err());
        assert!(other.ended_by_polling(Instant::now()), "the recorded process is gone: its number is another's");
        let running = procs::stat(pid).is_some_and(|s| s.state != 'Z');
        assert!(running, "the process that has the number now got the signal");
        let p = Process { fd: None, pid, start_time: start };
        assert!(!p.ended_by(Instant::now() + Duration::from_millis(50)));
        p.signal(Signal::SIGKILL).unwrap();
        assert!(p.ended_by(Instant::now() + Duration::from_secs(5)), "a zombie has ended");
        child.wait().unwrap();
    }
}
