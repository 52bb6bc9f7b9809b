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
//!
//! The decisions are here; what they do to the node is `start_ops.rs`
//! (tested with a fake in `start_tests.rs`). No free mesh port is the job's
//! misfortune, not the node's: a note for its steps, the node in service.
//! Any other error once the job's state is read is a node fault: the node
//! is drained with a reason that names it.
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use syndeo_protocol::handshake;
use syndeo_protocol::layout::JobDir;

use super::ops::System;
use super::prolog::mark_inherited_fds_cloexec;
use super::start_ops::{reserve_fds, StartOps};
use super::state::{JobState, ProcRecord};
use crate::job::JobSpec;
use syndeo_protocol::root::Start as StartArgs;

/// The mesh's listening socket, in the supervisor and the agent (LISTEN_FDS).
pub const MESH_FD: i32 = 3;
/// The sealed memory file with the job's state, in the supervisor and the agent.
pub const STATE_FD: i32 = 4;

/// How long `start` waits for the agent's socket.
pub(super) const AGENT_START_LIMIT: Duration = Duration::from_secs(10);

pub fn run(a: &StartArgs) -> Result<()> {
    mark_inherited_fds_cloexec();
    reserve_fds()?;
    run_with(&System, a)
}

/// `start` on `ops`: an error once the job's state is read is a node fault,
/// and drains the node.
pub(super) fn run_with<O: StartOps>(ops: &O, a: &StartArgs) -> Result<()> {
    if a.hold {
        wait_for_go(ops)?;
    }
    let c = &a.common;
    let Some(dir) = ops.open_state(&c.runtime_base, c.job)? else {
        return Ok(()); // the prolog refused the job here, and left a note
    };
    let state = ops.load_state(&dir)?;
    let result = start(ops, &dir, &state, &c.runtime_base);
    if let Err(e) = &result {
        ops.drain(&state.spec.node, &format!("node fault starting the agent of job {}: {e:#}", c.job));
    }
    if a.hold {
        // Until then the supervisor's PID stays its own (`StartOps::wait_for_eof`).
        ops.wait_for_eof();
    }
    result
}

fn start<O: StartOps>(ops: &O, dir: &O::StateDir, state: &JobState, runtime_base: &Path) -> Result<()> {
    let spec = &state.spec;
    let listener = match bind_mesh(ops, spec) {
        Ok(l) => l,
        Err(Busy(msg)) => return leave_note(ops, runtime_base, spec, &msg),
    };
    let sealed = ops.seal_state(state)?;
    let pid = ops.spawn_supervisor(spec, listener, sealed)?;
    let start_time = ops.stat(pid).map(|s| s.start_time).unwrap_or(0);
    ops.record_supervisor(dir, ProcRecord { pid, start_time })?;
    // For the plugin, which gives it to Slurm's accounting of the extern step.
    ops.tell_plugin(&handshake::supervisor_line(pid));
    // Return once the agent listens, so a job step never races its socket.
    let jd = spec.dir();
    match wait_for_agent(ops, &jd, pid, Instant::now() + AGENT_START_LIMIT) {
        AgentStart::Ready => {}
        AgentStart::Exited => {
            eprintln!("the node agent's supervisor exited at start; see {}", jd.agent_log().display())
        }
        AgentStart::Silent => {
            eprintln!("the node agent did not open {} within {AGENT_START_LIMIT:?}", jd.socket().display())
        }
    }
    Ok(())
}

/// How the agent's start went, as far as `start` waits for it. None of
/// them fails `start`: the job's steps find the agent, its note, or its log.
#[derive(Debug, PartialEq)]
pub(super) enum AgentStart {
    /// Its socket is there, or a note for the steps is.
    Ready,
    /// The supervisor ended (or is a zombie: it is never reaped here).
    Exited,
    /// Neither by the deadline.
    Silent,
}

/// Waits until the agent's socket or the job's note appears, the supervisor
/// ends, or `deadline` passes.
pub(super) fn wait_for_agent<O: StartOps>(ops: &O, jd: &JobDir, pid: i32, deadline: Instant) -> AgentStart {
    let listening = ops.socket_seen(jd);
    while Instant::now() < deadline {
        if listening.try_recv().is_ok() || ops.note_exists(jd) {
            return AgentStart::Ready;
        }
        // Not reaped (see `StartOps::wait_for_eof`): a zombie is a supervisor that ended.
        if ops.stat(pid).is_none_or(|s| s.state == 'Z') {
            return AgentStart::Exited;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    AgentStart::Silent
}

/// With the extern step: the plugin adds this process to the job's step,
/// then writes "go". Anything else (the plugin gone) ends this start.
fn wait_for_go<O: StartOps>(ops: &O) -> Result<()> {
    let line = ops.plugin_line()?;
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
fn bind_mesh<O: StartOps>(ops: &O, spec: &JobSpec) -> std::result::Result<O::Fd, Busy> {
    let ip = node_ip(ops, spec).map_err(|e| Busy(format!("{e:#}")))?;
    let high = spec.config.mesh_ports.high();
    if let Some(start) = ops.unprivileged_port_start() {
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
        if let Ok(fd) = ops.listen_on(SocketAddr::new(ip, port)) {
            return Ok(fd);
        }
    }
    Err(Busy(format!(
        "none of this job's mesh ports {ports:?} is free on {} ({ip}); too many syndeo jobs run there, or other \
         services use those ports: ask the admins to widen mesh_ports",
        spec.node
    )))
}

/// This node's address as Slurm's configuration gives it, or its name's
/// (IPv4 first).
fn node_ip<O: StartOps>(ops: &O, spec: &JobSpec) -> Result<IpAddr> {
    if let Some(ip) = spec.addr_of(spec.index) {
        return Ok(ip);
    }
    let addrs = ops.resolve(&spec.node).with_context(|| format!("resolving {}", spec.node))?;
    addrs.into_iter().min_by_key(|ip| ip.is_ipv6()).ok_or_else(|| anyhow!("{} has no address", spec.node))
}

/// The job cannot have its agent here: a note for its steps (as the prolog
/// leaves for a user's mistake); the node stays in service.
fn leave_note<O: StartOps>(ops: &O, runtime_base: &Path, spec: &JobSpec, message: &str) -> Result<()> {
    eprintln!("{message}");
    ops.write_note(runtime_base, spec.job_id, (spec.uid, spec.gid), message)
}
