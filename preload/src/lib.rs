//! The LD_PRELOAD library of a job's Ray container (`syndeo-preload.so`).
//!
//! The agent holds every port it picks for the job's Ray from the moment it
//! picks it: a TCP socket of the job's uid bound to `0.0.0.0:PORT` with
//! `SO_REUSEPORT` and nothing else (`agent/ports.rs`). No other uid can bind
//! that port on any address while it is held. Ray's own listeners do not set
//! `SO_REUSEPORT` (its gRPC servers turn it off), so they could not bind it
//! either; this library, loaded into every process of Ray's container, sets
//! `SO_REUSEPORT` on a socket just before it binds one of the held ports,
//! named in `SYNDEO_HELD_PORTS` (a comma-separated list in the environment,
//! which only the job's user can read). Binds of other ports, and port 0,
//! pass through untouched. A held socket never listens, so it takes no
//! connection: every connection to the port reaches Ray's listener.
//!
//! The environment is read at each bind (binds are rare): the launcher sets
//! the list after it started, before `ray start`.

use std::ffi::CStr;
use std::sync::OnceLock;

use libc::{c_int, c_void, sockaddr, socklen_t};
use syndeo_protocol::env::is_held_port;

/// [`syndeo_protocol::env::HELD_PORTS`], NUL-terminated for getenv.
const HELD_PORTS_C: &[u8] = b"SYNDEO_HELD_PORTS\0";

type BindFn = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;

/// libc's own `bind`, the next definition after this library's.
fn real_bind() -> Option<BindFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let addr = *REAL.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is a valid handle.
        unsafe { libc::dlsym(libc::RTLD_NEXT, b"bind\0".as_ptr().cast()) as usize }
    });
    // SAFETY: a non-null result of dlsym("bind") is libc's bind, of this type.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, BindFn>(addr) })
}

/// The port of an AF_INET or AF_INET6 address, if it is one.
///
/// # Safety
/// `addr` points to `len` readable bytes, or is null.
unsafe fn port_of(addr: *const sockaddr, len: socklen_t) -> Option<u16> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    match c_int::from((*addr).sa_family) {
        libc::AF_INET => Some(u16::from_be((*(addr as *const libc::sockaddr_in)).sin_port)),
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            Some(u16::from_be((*(addr as *const libc::sockaddr_in6)).sin6_port))
        }
        _ => None,
    }
}

/// `bind(2)`, with `SO_REUSEPORT` first when the port is one of the job's held ports.
///
/// # Safety
/// As `bind(2)`: `addr` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = real_bind() else {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    };
    if let Some(port) = port_of(addr, len) {
        let held = libc::getenv(HELD_PORTS_C.as_ptr().cast());
        if !held.is_null() && is_held_port(CStr::from_ptr(held).to_bytes(), port) {
            let one: c_int = 1;
            let size = std::mem::size_of::<c_int>() as socklen_t;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, &one as *const c_int as *const c_void, size);
        }
    }
    real(fd, addr, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_name_is_the_protocols_name() {
        assert_eq!(HELD_PORTS_C, format!("{}\0", syndeo_protocol::env::HELD_PORTS).as_bytes());
    }
}
