//! What `start` asks of the node and of Slurm (the plugin's hand-shake on
//! stdin and stdout, root's state directory of the job, the kernel's port
//! rule, the resolver, the mesh's socket, the sealed state, the supervisor
//! and its record, the note, draining), as one trait, so that its decisions
//! can be tested with a fake (`fake_start_ops.rs`). The real one is
//! `ops::System`: the descriptors, the memory file's seals and the
//! supervisor's clean start are here, as they were in `start.rs`.
use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage,
};
use nix::unistd::dup2;
use syndeo_protocol::env::JOB_MARKER;
use syndeo_protocol::layout::JobDir;

use super::ops::System;
use super::procs::{self, ProcStat};
use super::start::{AGENT_START_LIMIT, MESH_FD, STATE_FD};
use super::state::{JobState, ProcRecord, StateDir};
use super::{drain, note};
use crate::job::{JobSpec, STATE_FD_VAR};

pub trait StartOps {
    /// Root's state directory of the job, opened.
    type StateDir;
    /// An open descriptor: the mesh's listening socket, or the sealed state.
    type Fd;
    /// The plugin's first line on stdin (`--hold`).
    fn plugin_line(&self) -> Result<String>;
    /// Returns once the plugin has closed stdin (`--hold`).
    fn wait_for_eof(&self);
    /// Root's state directory of the job (`StateDir::open`): None if the
    /// prolog made none, an error if it is not root's alone.
    fn open_state(&self, runtime_base: &Path, job: u32) -> Result<Option<Self::StateDir>>;
    fn load_state(&self, dir: &Self::StateDir) -> Result<JobState>;
    /// net.ipv4.ip_unprivileged_port_start as the kernel gives it, if readable.
    fn unprivileged_port_start(&self) -> Option<String>;
    /// A node's addresses, by its name.
    fn resolve(&self, node: &str) -> std::io::Result<Vec<IpAddr>>;
    /// A listening TCP socket on `addr`, close-on-exec.
    fn listen_on(&self, addr: SocketAddr) -> nix::Result<Self::Fd>;
    /// The job's state in a sealed memory file.
    fn seal_state(&self, state: &JobState) -> Result<Self::Fd>;
    /// Starts the supervisor (as root: it drops to the job user first
    /// thing) with `mesh` and `state` as its descriptors 3 and 4; its PID.
    fn spawn_supervisor(&self, spec: &JobSpec, mesh: Self::Fd, state: Self::Fd) -> Result<i32>;
    /// A process's /proc/PID/stat, if it has one.
    fn stat(&self, pid: i32) -> Option<ProcStat>;
    fn record_supervisor(&self, dir: &Self::StateDir, r: ProcRecord) -> Result<()>;
    /// A line for the plugin on stdout (it may be gone: not an error).
    fn tell_plugin(&self, line: &str);
    /// Says once the agent's socket exists.
    fn socket_seen(&self, jd: &JobDir) -> Receiver<()>;
    /// Whether the job's note exists (`JobDir::failed_note`).
    fn note_exists(&self, jd: &JobDir) -> bool;
    fn write_note(&self, runtime_base: &Path, job: u32, owner: (u32, u32), message: &str) -> Result<()>;
    /// Drains `node` with a reason naming `cause` (reports, never fails).
    fn drain(&self, node: &str, cause: &str);
}

impl StartOps for System {
    type StateDir = StateDir;
    type Fd = OwnedFd;

    fn plugin_line(&self) -> Result<String> {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).context("waiting for the plugin's go")?;
        Ok(line)
    }
    /// The plugin gives the supervisor's PID (printed on stdout) to the
    /// job's step while this process lives, then closes its stdin. This
    /// process never reaps the supervisor, so until it ends that PID is the
    /// supervisor's, even if the supervisor has ended: the plugin never
    /// adopts a process that reused the number.
    fn wait_for_eof(&self) {
        let _ = std::io::stdin().lock().take(4096).read_to_end(&mut Vec::new());
    }
    fn open_state(&self, runtime_base: &Path, job: u32) -> Result<Option<StateDir>> {
        StateDir::open(runtime_base, job)
    }
    fn load_state(&self, dir: &StateDir) -> Result<JobState> {
        dir.load()
    }
    fn unprivileged_port_start(&self) -> Option<String> {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start").ok()
    }
    fn resolve(&self, node: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok((node, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
    fn listen_on(&self, addr: SocketAddr) -> nix::Result<OwnedFd> {
        listen_on(addr)
    }
    fn seal_state(&self, state: &JobState) -> Result<OwnedFd> {
        seal_state(state)
    }
    fn spawn_supervisor(&self, spec: &JobSpec, mesh: OwnedFd, state: OwnedFd) -> Result<i32> {
        dup2(mesh.as_raw_fd(), MESH_FD)?;
        dup2(state.as_raw_fd(), STATE_FD)?;
        drop((mesh, state));
        let child = supervisor_command(spec).spawn().context("starting the node agent's supervisor")?;
        Ok(child.id() as i32)
    }
    fn stat(&self, pid: i32) -> Option<ProcStat> {
        procs::stat(pid)
    }
    fn record_supervisor(&self, dir: &StateDir, r: ProcRecord) -> Result<()> {
        dir.record_supervisor(r)
    }
    fn tell_plugin(&self, line: &str) {
        let mut out = std::io::stdout();
        let _ = out.write_all(line.as_bytes()).and_then(|_| out.flush());
    }
    fn socket_seen(&self, jd: &JobDir) -> Receiver<()> {
        socket_seen(jd)
    }
    fn note_exists(&self, jd: &JobDir) -> bool {
        jd.failed_note().exists()
    }
    fn write_note(&self, runtime_base: &Path, job: u32, owner: (u32, u32), message: &str) -> Result<()> {
        note::write(runtime_base, job, owner, message)
    }
    fn drain(&self, node: &str, cause: &str) {
        drain::drain(node, cause)
    }
}

/// Descriptors 3 and 4 are the supervisor's: whatever this process got
/// there from Slurm (marked close-on-exec, and of no use here) makes room,
/// so nothing this process opens lands there by chance.
pub(super) fn reserve_fds() -> Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    for fd in [MESH_FD, STATE_FD] {
        if null.as_raw_fd() != fd {
            dup2(null.as_raw_fd(), fd)?;
        }
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    if [MESH_FD, STATE_FD].contains(&null.as_raw_fd()) {
        // It is one of the two now: closing it would free the place.
        std::mem::forget(null);
    }
    Ok(())
}

/// Says once the agent's socket exists. The job directory is the user's (a
/// FUSE mount of theirs on it could hang a look into it), so the look is
/// made in a thread this process does not wait for; it never follows a
/// link in the socket's place.
fn socket_seen(jd: &JobDir) -> Receiver<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisor_is_this_binary_started_in_slash_with_a_cleared_environment_naming_its_descriptors() {
        let spec = crate::job::simulated_spec(42, &["node1"], 0);
        let cmd = supervisor_command(&spec);
        assert_eq!(cmd.get_program(), "/proc/self/exe");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["supervise"]);
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")), "root never starts in the user's tree");
        let env: Vec<(String, String)> = cmd
            .get_envs()
            .filter(|(k, _)| *k != "HOME") // the test machine's user database
            .map(|(k, v)| (k.to_string_lossy().into(), v.unwrap_or_default().to_string_lossy().into()))
            .collect();
        let want = [
            (JOB_MARKER, "42"),
            ("LISTEN_FDS", "1"),
            ("LOGNAME", "u"),
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            (STATE_FD_VAR, "4"),
            ("USER", "u"),
        ];
        let mut want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        want.sort();
        assert_eq!(env, want);
        // Nothing of slurmd's environment: std shows a cleared one as `env -i`.
        assert!(format!("{cmd:?}").contains("env -i "), "{cmd:?}");
    }
}
