//! The job's Ray ports on this node, held from the moment they are picked.
//!
//! A port is picked by binding a holder to it: a TCP socket of the job's uid
//! on `0.0.0.0:PORT` with `SO_REUSEPORT` and without `SO_REUSEADDR`, which
//! never listens. While it is open, the kernel refuses that port to every
//! other uid, on every address (a bind conflicts unless both sockets set
//! `SO_REUSEPORT` and share a uid), so no co-tenant can take it between the
//! pick and Ray's bind, nor after Ray let it go. Ray's own binds of a held
//! port set `SO_REUSEPORT` through syndeo's preload library
//! (`syndeo-preload.so`, the `preload` crate), given the ports in
//! `SYNDEO_HELD_PORTS`. Holders never take connections: only listening
//! sockets do. They stay open until the agent ends, unless the image cannot
//! load the library (then they are let go before `ray start`: the old race,
//! said in the job's output).
//!
//! Ports come from `ray_ports` less the kernel's ephemeral range, scanned
//! from a block of the job's own so that jobs starting together pick apart;
//! when every one is held by someone, the kernel picks (still held).
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use nix::errno::Errno;
use nix::sys::socket::{bind, getsockname, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use tracing::warn;

use crate::job::JobSpec;

/// The holders of a node's picked ports, shared by the node's and the
/// head's picks; open until the agent ends or [`Holds::release`].
#[derive(Clone, Default)]
pub struct Holds(Arc<Mutex<Vec<(u16, OwnedFd)>>>);

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Holds({:?})", self.ports())
    }
}

impl Holds {
    fn keep(&self, port: u16, fd: OwnedFd) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push((port, fd));
    }

    /// The ports held now.
    pub fn ports(&self) -> Vec<u16> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(p, _)| *p).collect()
    }

    /// Lets every port go (for an image that cannot load the preload library).
    pub fn release(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// Binds a holder to `port` (0: the kernel picks one); the port it holds.
///
/// The bind comes first, without `SO_REUSEPORT`: it fails on a port anyone
/// holds, this uid's other jobs (and this job's own picks) included. Only
/// then is `SO_REUSEPORT` set, which lets this uid's later binds (Ray's,
/// through the preload library) join the holder.
pub fn hold(port: u16) -> Result<(u16, OwnedFd), Errno> {
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)))?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    let bound: SockaddrIn = getsockname(std::os::fd::AsRawFd::as_raw_fd(&fd))?;
    Ok((bound.port(), fd))
}

/// Where a job's Ray ports come from on this node (see the module's text).
pub struct PortSource {
    ports: Vec<u16>,
    start: usize,
    /// How far the scan went: the ports before were picked or busy.
    scanned: Cell<usize>,
}

/// Ports per job's block: a node's six and the head's three fit, nearly.
const BLOCK: usize = 10;

impl PortSource {
    pub fn for_job(spec: &JobSpec) -> Result<PortSource> {
        Ok(PortSource::new(spec.config.ray_ports.bounds(), ephemeral_range(), spec.job_id))
    }

    pub fn new((lo, hi): (u16, u16), ephemeral: Option<(u16, u16)>, job_id: u32) -> PortSource {
        let mut ports: Vec<u16> = (lo..=hi).filter(|p| !ephemeral.is_some_and(|(a, b)| (a..=b).contains(p))).collect();
        if ports.is_empty() {
            warn!(
                "ray_ports {lo}-{hi} lies inside the ephemeral range {ephemeral:?} \
                 (net.ipv4.ip_local_port_range): a connection may take a port syndeo would pick"
            );
            ports = (lo..=hi).collect();
        }
        let blocks = (ports.len() / BLOCK).max(1);
        PortSource { start: job_id as usize % blocks * BLOCK, ports, scanned: Cell::new(0) }
    }

    /// Picks and holds (in `holds`) a port distinct from those already held there.
    pub fn pick(&self, holds: &Holds) -> Result<u16> {
        for _ in 0..64 {
            let (port, fd) = self.offer()?;
            let fresh = !holds.ports().contains(&port);
            holds.keep(port, fd);
            if fresh {
                return Ok(port);
            }
        }
        anyhow::bail!("the kernel kept offering ports this job holds already")
    }

    /// The first `n` ports of the job's block, not held (simulated nodes
    /// only: see `NodePorts::unheld`).
    #[cfg(any(test, feature = "simulation"))]
    pub fn first(&self, n: usize) -> Vec<u16> {
        (0..n).map(|i| self.ports[(self.start + i) % self.ports.len()]).collect()
    }

    /// The next port of the range a holder binds, from where the scan
    /// stands; else the kernel's pick.
    fn offer(&self) -> Result<(u16, OwnedFd)> {
        while self.scanned.get() < self.ports.len() {
            let port = self.ports[(self.start + self.scanned.get()) % self.ports.len()];
            self.scanned.set(self.scanned.get() + 1);
            match hold(port) {
                Ok(held) => return Ok(held),
                Err(Errno::EADDRINUSE) => continue,
                Err(e) => return Err(anyhow::anyhow!("holding port {port}: {e}")),
            }
        }
        if self.scanned.replace(usize::MAX) != usize::MAX {
            warn!("every port of ray_ports is in use; Ray gets ports the kernel picks");
        }
        hold(0).map_err(|e| anyhow::anyhow!("holding a port the kernel picks: {e}"))
    }
}

/// The kernel's ephemeral port range in this network namespace.
fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// The uids of the listening TCP sockets on `port` for `ip` (its own or a
/// wildcard address), from the kernel's table of `ip`'s family: whose
/// listener a connection to `ip:port` may reach. For an IPv4 `ip` the IPv6
/// table does not count: while the job holds `0.0.0.0:port`, another uid
/// can bind that port there only IPv6-only (a dual-stack socket conflicts),
/// which no IPv4 connection reaches.
pub fn listener_uids(ip: IpAddr, port: u16) -> Vec<u32> {
    let table = if ip.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let text = std::fs::read_to_string(table).unwrap_or_default();
    text.lines().skip(1).filter_map(|l| listener_uid(l, ip, port)).collect()
}

/// Whether a listener of uid `me` takes connections to `ip:port`: Ok(true)
/// when one does, Ok(false) while none listens, Err(uid) when a listener of
/// another uid could take them. A gRPC server (Ray's GCS) told to listen on
/// every address listens dual-stack on `[::]:port`, which only the IPv6
/// table shows: for an IPv4 `ip` a wildcard listener of `me` there counts
/// too. Another uid's listener there does not: while the job holds
/// `0.0.0.0:port`, it can only be IPv6-only (see `listener_uids`).
pub fn own_listener(ip: IpAddr, port: u16, me: u32) -> Result<bool, u32> {
    let uids = listener_uids(ip, port);
    if let Some(other) = uids.iter().find(|u| **u != me) {
        return Err(*other);
    }
    let dual_stack = || ip.is_ipv4() && listener_uids(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port).contains(&me);
    Ok(!uids.is_empty() || dual_stack())
}

/// The uid of one line of /proc/net/tcp{,6} if it is a listener on `port`
/// that takes connections to `ip`.
fn listener_uid(line: &str, ip: IpAddr, port: u16) -> Option<u32> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let (addr, state, uid) = (f.get(1)?, f.get(3)?, f.get(7)?);
    let (host, p) = addr.split_once(':')?;
    if *state != "0A" || u16::from_str_radix(p, 16).ok()? != port {
        return None;
    }
    let wildcard = host.bytes().all(|b| b == b'0');
    let own = match ip {
        IpAddr::V4(v4) => host.len() == 8 && u32::from_str_radix(host, 16).ok()? == u32::from_ne_bytes(v4.octets()),
        IpAddr::V6(_) => false,
    };
    (wildcard || own).then(|| uid.parse().ok()).flatten()
}

/// syndeo's preload library beside the agent's executable, if installed.
pub fn preload_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.with_file_name(PRELOAD_NAME)).filter(|p| p.is_file())
}

/// The preload library's file name, installed beside the agent and copied
/// into the job's temp dir (which Ray's container has at the same path).
pub const PRELOAD_NAME: &str = "syndeo-preload.so";

/// Copies the preload library into `dir`; the copy's path.
pub fn copy_preload(lib: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    let to = dir.join(PRELOAD_NAME);
    std::fs::copy(lib, &to)?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_held_port_cannot_be_bound_by_a_socket_without_reuseport_on_any_address() {
        let (port, _held) = hold(0).unwrap();
        for ip in [[0u8, 0, 0, 0], [127, 0, 0, 1]] {
            let e = TcpListener::bind((IpAddr::from(ip), port)).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{ip:?}:{port}");
        }
    }

    #[test]
    fn a_held_port_can_be_bound_by_the_same_uid_with_reuseport_and_its_listener_takes_connections() {
        let (port, _held) = hold(0).unwrap();
        // As Ray's bind through the preload library: SO_REUSEPORT, then bind.
        let listener = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
        setsockopt(&listener, sockopt::ReusePort, &true).unwrap();
        let addr = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        bind(std::os::fd::AsRawFd::as_raw_fd(&listener), &addr).unwrap();
        nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(4).unwrap()).unwrap();
        let lo = IpAddr::from([127u8, 0, 0, 1]);
        assert!(std::net::TcpStream::connect((lo, port)).is_ok());
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(listener_uids(lo, port), [me], "one listener, the holder is not one");
    }

    #[test]
    fn a_dual_stack_listener_of_this_uid_on_a_held_port_counts_as_taking_its_ipv4_connections() {
        let (port, _held) = hold(0).unwrap();
        let me = nix::unistd::getuid().as_raw();
        let lo = IpAddr::from([127u8, 0, 0, 1]);
        assert_eq!(own_listener(lo, port, me), Ok(false), "the holder does not listen");
        // As Ray's GCS (gRPC on every address): one socket on [::]:port, not
        // IPv6-only, SO_REUSEPORT through the preload library.
        let listener = socket(AddressFamily::Inet6, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
        setsockopt(&listener, sockopt::ReusePort, &true).unwrap();
        setsockopt(&listener, sockopt::Ipv6V6Only, &false).unwrap();
        let any = nix::sys::socket::SockaddrIn6::from(std::net::SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
        bind(std::os::fd::AsRawFd::as_raw_fd(&listener), &any).unwrap();
        nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(4).unwrap()).unwrap();
        assert!(std::net::TcpStream::connect((lo, port)).is_ok(), "it takes IPv4 connections");
        assert!(listener_uids(lo, port).is_empty(), "the IPv4 table does not show it");
        assert_eq!(own_listener(lo, port, me), Ok(true));
        assert_eq!(
            own_listener(lo, port, me + 1),
            Ok(false),
            "to another uid, a wildcard IPv6 listener not its own is not its GCS"
        );
    }

    #[test]
    fn a_port_this_uid_holds_already_another_jobs_or_this_ones_is_not_held_again() {
        let (port, _held) = hold(0).unwrap();
        assert_eq!(hold(port).unwrap_err(), Errno::EADDRINUSE);
    }

    #[test]
    fn picks_are_distinct_held_and_skip_ports_in_use_from_the_jobs_block() {
        let from = PortSource::new((23100, 23299), None, 5);
        assert_eq!(from.start, 50, "job 5's block");
        let busy = TcpListener::bind(("127.0.0.1", 23151)).unwrap();
        let holds = Holds::default();
        let picked: Vec<u16> = (0..4).map(|_| from.pick(&holds).unwrap()).collect();
        drop(busy);
        assert_eq!(picked, [23150, 23152, 23153, 23154]);
        assert_eq!(holds.ports(), picked);
        assert!(TcpListener::bind(("127.0.0.1", 23152)).is_err(), "held");
        holds.release();
        assert!(TcpListener::bind(("127.0.0.1", 23152)).is_ok(), "let go");
    }

    #[test]
    fn when_another_holds_every_port_of_ray_ports_the_kernel_picks_and_they_are_held_too() {
        let from = PortSource::new((23300, 23363), None, 2);
        let squatted: Vec<TcpListener> =
            (23300..=23363).filter_map(|p| TcpListener::bind(("127.0.0.1", p)).ok()).collect();
        assert_eq!(squatted.len(), 64, "the test's ports are free");
        let holds = Holds::default();
        let picked: Vec<u16> = (0..3).map(|_| from.pick(&holds).unwrap()).collect();
        assert!(picked.iter().all(|p| !(23300..=23363).contains(p)), "{picked:?}");
        assert!(picked.iter().all(|p| TcpListener::bind(("0.0.0.0", *p)).is_err()), "{picked:?}");
    }

    #[test]
    fn ray_ports_leave_out_the_ephemeral_range_and_jobs_start_in_blocks_of_their_own() {
        let from = PortSource::new((30000, 33999), Some((32768, 60999)), 3);
        assert_eq!((from.ports.len(), from.ports[from.ports.len() - 1]), (2768, 32767));
        assert_eq!(from.start, 30);
        assert_ne!(PortSource::new((30000, 33999), None, 4).start, PortSource::new((30000, 33999), None, 5).start);
        let inside = PortSource::new((40000, 40099), Some((32768, 60999)), 1);
        assert_eq!(inside.ports.len(), 100, "all inside: the range as it is, rather than none");
    }

    #[test]
    fn a_listener_counts_for_its_own_address_and_the_wildcard_only() {
        // 0100007F:1F90 is 127.0.0.1:8080 (little-endian address); state 0A listens.
        let line = "0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001 0 1 1";
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(listener_uid(line, lo, 8080), Some(1001));
        assert_eq!(listener_uid(line, "10.0.0.1".parse().unwrap(), 8080), None);
        assert_eq!(listener_uid(line, lo, 8081), None);
        let any = line.replace("0100007F", "00000000");
        assert_eq!(listener_uid(&any, "10.0.0.1".parse().unwrap(), 8080), Some(1001));
        let closed = line.replace(" 0A ", " 07 ");
        assert_eq!(listener_uid(&closed, lo, 8080), None);
    }
}
