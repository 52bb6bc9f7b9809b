//! A fake [`StartOps`] for `start`'s tests: it answers what the test
//! scripted (the plugin's line, root's record of the job, the kernel's port
//! rule, the resolver, which ports are taken, the supervisor's fate, which
//! operations fail) and records, in order, what `start` did to the node,
//! the note it left and the drain it asked for.
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::mpsc::Receiver;

use anyhow::{anyhow, Result};
use syndeo_protocol::layout::JobDir;

use super::procs::ProcStat;
use super::start_ops::StartOps;
use super::state::{JobState, ProcRecord};
use crate::job::JobSpec;

/// The PID the fake gives the supervisor, and its start time.
pub const SUPERVISOR_PID: i32 = 4242;
pub const SUPERVISOR_START: u64 = 777;

pub struct FakeStartOps {
    /// What the plugin writes on stdin first (Err: stdin failed).
    pub plugin_line: Result<String, String>,
    /// Whether the prolog made root's state directory (Err: not root's alone).
    pub state_dir: Result<bool, String>,
    /// The job's state read from it (Err: it cannot be read).
    pub state: Result<JobState, String>,
    /// net.ipv4.ip_unprivileged_port_start, if readable.
    pub unprivileged_port_start: Option<String>,
    /// The resolver's answer for the node's name (Err: it failed).
    pub resolved: Result<Vec<IpAddr>, String>,
    /// Ports another process listens on.
    pub taken: BTreeSet<u16>,
    /// The supervisor's state letter after its start ('S', 'Z'; None: gone).
    pub supervisor: Option<char>,
    /// Whether the agent's socket appears, and the job's note.
    pub socket_appears: bool,
    pub note_appears: bool,
    /// Operations that fail, by their call's first word ("seal", "spawn",
    /// "record", "note"), with why.
    pub failing: BTreeMap<&'static str, String>,
    /// Everything done, in order ("listen 10.0.0.1:612", "spawn ...", ...).
    pub calls: RefCell<Vec<String>>,
    pub notes: RefCell<Vec<String>>,
    pub drained: RefCell<Vec<(String, String)>>,
}

impl FakeStartOps {
    /// Job 42 on node1 of node[1-2] (node1 at 10.0.0.1), prepared by the
    /// prolog; the plugin says go; every port free; the agent comes up.
    pub fn new() -> Self {
        let mut spec = crate::job::simulated_spec(42, &["node1", "node2"], 0);
        spec.addrs = vec![Some("10.0.0.1".parse().unwrap()), Some("10.0.0.2".parse().unwrap())];
        FakeStartOps {
            plugin_line: Ok("go\n".into()),
            state_dir: Ok(true),
            state: Ok(JobState { spec, secret: "00".into() }),
            unprivileged_port_start: Some("1024\n".into()),
            resolved: Err("the resolver was not expected".into()),
            taken: BTreeSet::new(),
            supervisor: Some('S'),
            socket_appears: true,
            note_appears: false,
            failing: BTreeMap::new(),
            calls: RefCell::default(),
            notes: RefCell::default(),
            drained: RefCell::default(),
        }
    }

    /// The job's spec, changed by `f`.
    pub fn with_spec(f: impl FnOnce(&mut JobSpec)) -> Self {
        let mut ops = FakeStartOps::new();
        if let Ok(state) = &mut ops.state {
            f(&mut state.spec);
        }
        ops
    }

    pub fn spec(&self) -> JobSpec {
        self.state.as_ref().expect("the test's job has a state").spec.clone()
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    /// Whether any recorded call starts with `prefix`.
    pub fn did(&self, prefix: &str) -> bool {
        self.calls.borrow().iter().any(|c| c.starts_with(prefix))
    }

    /// Records `call`, then fails if the test said its first word fails.
    fn act(&self, call: String) -> Result<()> {
        let word = call.split(' ').next().unwrap_or_default().to_string();
        self.calls.borrow_mut().push(call);
        match self.failing.get(word.as_str()) {
            Some(why) => Err(anyhow!("{why}")),
            None => Ok(()),
        }
    }
}

impl StartOps for FakeStartOps {
    type StateDir = ();
    /// What the descriptor is ("10.0.0.1:612", "sealed state of job 42").
    type Fd = String;

    fn plugin_line(&self) -> Result<String> {
        self.act("read-go".into())?;
        self.plugin_line.clone().map_err(|m| anyhow!(m))
    }
    fn wait_for_eof(&self) {
        let _ = self.act("eof".into());
    }
    fn open_state(&self, _runtime_base: &Path, job: u32) -> Result<Option<()>> {
        self.act(format!("open-state {job}"))?;
        let made = self.state_dir.clone().map_err(|m| anyhow!(m))?;
        Ok(made.then_some(()))
    }
    fn load_state(&self, _dir: &()) -> Result<JobState> {
        self.act("load-state".into())?;
        self.state.clone().map_err(|m| anyhow!(m))
    }
    fn unprivileged_port_start(&self) -> Option<String> {
        self.unprivileged_port_start.clone()
    }
    fn resolve(&self, node: &str) -> std::io::Result<Vec<IpAddr>> {
        let _ = self.act(format!("resolve {node}"));
        self.resolved.clone().map_err(std::io::Error::other)
    }
    fn listen_on(&self, addr: SocketAddr) -> nix::Result<String> {
        let _ = self.act(format!("listen {addr}"));
        if self.taken.contains(&addr.port()) {
            return Err(nix::errno::Errno::EADDRINUSE);
        }
        Ok(addr.to_string())
    }
    fn seal_state(&self, state: &JobState) -> Result<String> {
        self.act(format!("seal {}", state.spec.job_id))?;
        Ok(format!("sealed state of job {}", state.spec.job_id))
    }
    fn spawn_supervisor(&self, spec: &JobSpec, mesh: String, state: String) -> Result<i32> {
        self.act(format!("spawn supervisor of {} with 3={mesh} 4={state}", spec.user))?;
        Ok(SUPERVISOR_PID)
    }
    fn stat(&self, pid: i32) -> Option<ProcStat> {
        let state = self.supervisor.filter(|_| pid == SUPERVISOR_PID)?;
        Some(ProcStat { pid, state, session: pid, start_time: SUPERVISOR_START })
    }
    fn record_supervisor(&self, _dir: &(), r: ProcRecord) -> Result<()> {
        self.act(format!("record {} {}", r.pid, r.start_time))
    }
    fn tell_plugin(&self, line: &str) {
        let _ = self.act(format!("tell {}", line.trim_end()));
    }
    fn socket_seen(&self, _jd: &JobDir) -> Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.socket_appears {
            let _ = tx.send(());
        }
        rx
    }
    fn note_exists(&self, _jd: &JobDir) -> bool {
        self.note_appears
    }
    fn write_note(&self, _runtime_base: &Path, job: u32, (uid, gid): (u32, u32), message: &str) -> Result<()> {
        self.act(format!("note {job} {uid}:{gid}"))?;
        self.notes.borrow_mut().push(message.into());
        Ok(())
    }
    fn drain(&self, node: &str, cause: &str) {
        let _ = self.act(format!("drain {node}"));
        self.drained.borrow_mut().push((node.into(), cause.into()));
    }
}
