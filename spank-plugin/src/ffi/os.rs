//! The one OS call the plugin makes beside what std offers: making a pipe
//! non-blocking, so the agent's stderr is drained while it runs (`child.rs`).
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
