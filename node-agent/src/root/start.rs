//! `syndeo-agent start` (root, started by the SPANK plugin after the
//! prolog): starts this node's agent for a prepared job. From the job's
//! extern step, the plugin first adds this process to the step (as
//! pam_slurm_adopt does), then tells it to go (`--hold`): everything started
//! from here on lives in the job's cgroups.
//!
//! It binds the mesh's listening socket on this node's address, on a
//! privileged port, which no user can bind first; seals the job's spec and
//! secret into a memory file the user's processes can read and no one can
//! change; and starts the supervisor with both as descriptors 3 and 4. The
//! supervisor drops to the job user first thing, before anything of the
//! user's runs, so this process, which Slurm waits on, stays root's and no
//! process of the user can stop it. It returns once the agent listens.
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage,
};
use nix::unistd::dup2;
use syndeo_protocol::env::JOB_MARKER;
use syndeo_protocol::handshake;
use syndeo_protocol::layout::JobDir;

use super::prolog::mark_inherited_fds_cloexec;
use super::state::{JobState, ProcRecord, StateDir};
use super::{drain, procs};
use crate::job::{JobSpec, STATE_FD_VAR};
use syndeo_protocol::root::Start as StartArgs;

/// The mesh's listening socket, in the supervisor and the agent (LISTEN_FDS).
pub const MESH_FD: i32 = 3;
/// The sealed memory file with the job's state, in the supervisor and the agent.
pub const STATE_FD: i32 = 4;

/// How long `start` waits for the agent's socket.
const AGENT_START_LIMIT: Duration = Duration::from_secs(10);

pub fn run(a: &StartArgs) -> Result<()> {
    mark_inherited_fds_cloexec();
    reserve_fds()?;
    if a.hold {
        wait_for_go()?;
    }
    let c = &a.common;
    let Some(dir) = StateDir::open(&c.runtime_base, c.job)? else {
        return Ok(()); // the prolog refused the job here, and left a note
    };
    let state = dir.load()?;
    let result = start(&dir, &state, &c.runtime_base);
    if let Err(e) = &result {
        drain::drain(&state.spec.node, &format!("node fault starting the agent of job {}: {e:#}", c.job));
    }
    if a.hold {
        wait_for_eof();
    }
    result
}

/// The plugin gives the supervisor's PID (printed on stdout) to the job's
/// step while this process lives, then closes its stdin. This process never
/// reaps the supervisor, so until it ends that PID is the supervisor's,
/// even if the supervisor has ended: the plugin never adopts a process that
/// reused the number.
fn wait_for_eof() {
    use std::io::Read;
    let _ = std::io::stdin().lock().take(4096).read_to_end(&mut Vec::new());
}

fn start(dir: &StateDir, state: &JobState, runtime_base: &Path) -> Result<()> {
    let spec = &state.spec;
    let listener = match bind_mesh(spec) {
        Ok(l) => l,
        Err(Busy(msg)) => return leave_note(runtime_base, spec, &msg),
    };
    let sealed = seal_state(state)?;
    dup2(listener.as_raw_fd(), MESH_FD)?;
    dup2(sealed.as_raw_fd(), STATE_FD)?;
    drop((listener, sealed));
    let child = supervisor_command(spec).spawn().context("starting the node agent's supervisor")?;
    let pid = child.id() as i32;
    let start_time = procs::stat(pid).map(|s| s.start_time).unwrap_or(0);
    dir.record_supervisor(ProcRecord { pid, start_time })?;
    // For the plugin, which gives it to Slurm's accounting of the extern step.
    let mut out = std::io::stdout();
    let _ = out.write_all(handshake::supervisor_line(pid).as_bytes()).and_then(|_| out.flush());
    // Return once the agent listens, so a job step never races its socket.
    let jd = spec.dir();
    let listening = socket_seen(&jd);
    let deadline = Instant::now() + AGENT_START_LIMIT;
    while Instant::now() < deadline {
        if listening.try_recv().is_ok() || jd.failed_note().exists() {
            return Ok(());
        }
        // Not reaped (see `wait_for_eof`): a zombie is a supervisor that ended.
        if procs::stat(pid).is_none_or(|s| s.state == 'Z') {
            eprintln!("the node agent's supervisor exited at start; see {}", jd.agent_log().display());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("the node agent did not open {} within {AGENT_START_LIMIT:?}", jd.socket().display());
    Ok(())
}

/// Says once the agent's socket exists. The job directory is the user's (a
/// FUSE mount of theirs on it could hang a look into it), so the look is
/// made in a thread this process does not wait for; it never follows a
/// link in the socket's place.
fn socket_seen(jd: &JobDir) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let socket = jd.socket();
    std::thread::spawn(move || {
        let deadline = Instant::now() + AGENT_START_LIMIT;
        while Instant::now() < deadline {
            if std::fs::symlink_metadata(&socket).is_ok() {
                let _ = tx.send(());
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    rx
}

/// Descriptors 3 and 4 are the supervisor's: whatever this process got
/// there from Slurm (marked close-on-exec, and of no use here) makes room,
/// so nothing this process opens lands there by chance.
fn reserve_fds() -> Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    for fd in [MESH_FD, STATE_FD] {
        if null.as_raw_fd() != fd {
            dup2(null.as_raw_fd(), fd)?;
        }
        fcntl(fd, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    }
    if [MESH_FD, STATE_FD].contains(&null.as_raw_fd()) {
        // It is one of the two now: closing it would free the place.
        std::mem::forget(null);
    }
    Ok(())
}

/// With the extern step: the plugin adds this process to the job's step,
/// then writes "go". Anything else (the plugin gone) ends this start.
fn wait_for_go() -> Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("waiting for the plugin's go")?;
    if !handshake::is_go(&line) {
        bail!("the plugin did not say go ({:?}); not starting the agent", line.trim());
    }
    Ok(())
}

/// None of the job's mesh ports is free on this node: the job fails here
/// with a message, the node stays in service.
struct Busy(String);

/// The mesh's socket on this node's address: the first of the job's
/// candidate ports that is free. Only privileged ports are used (the
/// configuration insists), and the kernel must keep them privileged, or
/// users could squat them.
fn bind_mesh(spec: &JobSpec) -> std::result::Result<OwnedFd, Busy> {
    let ip = node_ip(spec).map_err(|e| Busy(format!("{e:#}")))?;
    let high = spec.config.mesh_ports.high();
    if let Ok(start) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start") {
        if start.trim().parse::<u16>().is_ok_and(|s| s <= high) {
            return Err(Busy(format!(
                "net.ipv4.ip_unprivileged_port_start is {} on {}, so users can bind syndeo's mesh ports (up to \
                 {high}); ask the admins to raise it above {high}",
                start.trim(),
                spec.node
            )));
        }
    }
    let ports = spec.mesh_ports();
    for &port in &ports {
        if let Ok(fd) = listen_on(SocketAddr::new(ip, port)) {
            return Ok(fd);
        }
    }
    Err(Busy(format!(
        "none of this job's mesh ports {ports:?} is free on {} ({ip}); too many syndeo jobs run there, or other \
         services use those ports: ask the admins to widen mesh_ports",
        spec.node
    )))
}

/// This node's address as Slurm's configuration gives it, or its name's.
fn node_ip(spec: &JobSpec) -> Result<IpAddr> {
    if let Some(ip) = spec.addr_of(spec.index) {
        return Ok(ip);
    }
    use std::net::ToSocketAddrs;
    let addrs = (spec.node.as_str(), 0).to_socket_addrs().with_context(|| format!("resolving {}", spec.node))?;
    addrs.map(|a| a.ip()).min_by_key(|ip| ip.is_ipv6()).ok_or_else(|| anyhow!("{} has no address", spec.node))
}

fn listen_on(addr: SocketAddr) -> nix::Result<OwnedFd> {
    let family = if addr.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    listen(&fd, Backlog::new(8192).unwrap_or(Backlog::MAXCONN))?;
    Ok(fd)
}

/// The job's state in a memory file, sealed: the user's processes can read
/// it (through the inherited descriptor), nobody can change it.
fn seal_state(state: &JobState) -> Result<OwnedFd> {
    let flags = MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING;
    let fd = memfd_create(c"syndeo-job-state", flags).context("memfd_create")?;
    let mut f = std::fs::File::from(fd);
    f.write_all(serde_json::to_string(state)?.as_bytes())?;
    let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SEAL;
    fcntl(f.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).context("sealing the job state")?;
    Ok(OwnedFd::from(f))
}

/// The supervisor, started as root from this very binary; it drops to the
/// job user first thing (`supervisor.rs`).
fn supervisor_command(spec: &JobSpec) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("syndeo-agent")
        .arg("supervise")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("USER", &spec.user)
        .env("LOGNAME", &spec.user)
        .env(JOB_MARKER, spec.job_id.to_string())
        .env("LISTEN_FDS", "1")
        .env(STATE_FD_VAR, STATE_FD.to_string())
        // Not the job directory: root never walks into the user's tree (the
        // supervisor goes there once it is the user).
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(spec.uid)) {
        cmd.env("HOME", u.dir);
    }
    cmd
}

/// The job cannot have its agent here: a note for its steps (as the prolog
/// leaves for a user's mistake); the node stays in service.
fn leave_note(runtime_base: &Path, spec: &JobSpec, message: &str) -> Result<()> {
    eprintln!("{message}");
    super::note::write(runtime_base, spec.job_id, (spec.uid, spec.gid), message)
}
