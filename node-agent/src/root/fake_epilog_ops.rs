//! A fake [`EpilogOps`] for the epilog's tests: it answers what the test
//! scripted (the site configuration, root's record of the job, whether the
//! supervisor runs, which processes survive, which paths resist) and
//! records, in order, what the epilog did to the node.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::budget::Budget;
use super::epilog_ops::{EpilogOps, Recorded};
use super::state::{JobState, ProcRecord};
use crate::config::{Config, ConfigError};
use crate::job::JobSpec;

pub struct FakeEpilogOps {
    pub env: BTreeMap<String, String>,
    /// The site configuration, or the message that makes it invalid.
    pub config: Result<Config, String>,
    /// Root's state directory of the job (Err: it is not root's alone).
    pub state_dir: Result<Option<Recorded>, String>,
    /// Whether the recorded supervisor still runs.
    pub supervisor_runs: bool,
    /// The job's processes that survive SIGKILL.
    pub survivors: Vec<i32>,
    /// What `job_container` says of the temp base (None: the config's own).
    pub temp_base: Option<Result<PathBuf, String>>,
    /// Paths whose removal fails, with why.
    pub stuck: BTreeMap<PathBuf, String>,
    /// Everything done to the node, in order ("remove /run/syndeo 42", ...).
    pub calls: RefCell<Vec<String>>,
}

impl FakeEpilogOps {
    /// Node `node1`, no state directory, no survivors, nothing stuck.
    pub fn new() -> Self {
        FakeEpilogOps {
            env: BTreeMap::from([("SLURMD_NODENAME".into(), "node1".into())]),
            config: Ok(Config::default()),
            state_dir: Ok(None),
            supervisor_runs: false,
            survivors: vec![],
            temp_base: None,
            stuck: BTreeMap::new(),
            calls: RefCell::default(),
        }
    }

    /// A state directory with the spec of job `job` on node1 and a supervisor, pid 77.
    pub fn with_state(job: u32, spec: impl FnOnce(&mut JobSpec)) -> Self {
        let mut s = crate::job::simulated_spec(job, &["node1", "node2"], 0);
        spec(&mut s);
        let state = JobState { spec: s, secret: "00".into() };
        let supervisor = ProcRecord { pid: 77, start_time: 1 };
        let recorded = Recorded { state: Some(state), supervisor: Some(supervisor) };
        FakeEpilogOps { state_dir: Ok(Some(recorded)), ..FakeEpilogOps::new() }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn record(&self, call: String) {
        self.calls.borrow_mut().push(call);
    }

    fn stuck(&self, path: PathBuf) -> Result<()> {
        match self.stuck.get(&path) {
            Some(why) => Err(anyhow!("{why}")),
            None => Ok(()),
        }
    }
}

impl EpilogOps for FakeEpilogOps {
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError> {
        self.config.clone().map_err(|message| ConfigError::Invalid { path: path.into(), message })
    }
    fn open_state(&self, _runtime_base: &Path, _job: u32) -> Result<Option<Recorded>> {
        self.state_dir.clone().map_err(|m| anyhow!(m))
    }
    fn stop_supervisor(&self, r: ProcRecord, _budget: &Budget, stop_grace: u64) -> Option<i32> {
        self.record(format!("stop {} grace {stop_grace}", r.pid));
        self.supervisor_runs.then_some(r.pid)
    }
    fn kill_all(&self, uid: u32, job: u32, session: Option<i32>, _deadline: Instant) -> Vec<i32> {
        self.record(format!("kill uid {uid} job {job} session {session:?}"));
        self.survivors.clone()
    }
    fn describe(&self, pid: i32) -> String {
        format!("pid {pid} (stuck)")
    }
    fn save_logs(&self, spec: &JobSpec, _deadline: Instant) {
        self.record(format!("logs {}", spec.job_id));
    }
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String> {
        self.temp_base.clone().unwrap_or_else(|| Ok(config.temp_base.clone()))
    }
    fn remove_job_dir(&self, base: &Path, name: &str, _deadline: Instant) -> Vec<String> {
        let dir = base.join(name);
        self.record(format!("remove {}", dir.display()));
        match self.stuck(dir.clone()) {
            Ok(()) => vec![],
            Err(why) => vec![format!("{}: {why}", dir.display())],
        }
    }
    fn remove_metrics_file(&self, dir: &Path, job: u32, node: &str) -> Result<()> {
        self.record(format!("metrics {} {job} {node}", dir.display()));
        self.stuck(dir.into())
    }
    fn remove_state(&self, runtime_base: &Path, job: u32) -> Result<()> {
        self.record(format!("state {job}"));
        self.stuck(syndeo_protocol::layout::state_dir(runtime_base, job))
    }
    fn clear_note(&self, _runtime_base: &Path, job: u32) -> Result<()> {
        self.record(format!("clear-note {job}"));
        Ok(())
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
}
