//! A fake [`Spank`] and a fake [`Node`] for the hooks' tests: each records
//! what a hook set, logged and ran, and answers what the test scripted.
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::WaitReply;

use crate::node::{Finished, Node, RunError};
use crate::spank::{Context, RunningConf, Spank, SpankError};

/// The job every fake runs: job 42, user 1000, group 100, step 0.
pub struct FakeSpank {
    pub context: Context,
    pub args: Vec<String>,
    pub option: Option<Option<String>>,
    pub step: u32,
    pub conf: RunningConf,
    /// The job's (or task's) environment: getenv/setenv/unsetenv.
    pub env: RefCell<BTreeMap<String, String>>,
    /// The job's SPANK environment: job_control_setenv/unsetenv.
    pub control_env: RefCell<BTreeMap<String, String>>,
    /// The task's argv[0].
    pub argv0: RefCell<String>,
    pub registered: RefCell<bool>,
    /// "error: ...", "info: ...", "verbose: ..." lines.
    pub log: RefCell<Vec<String>>,
}

pub const JOB: u32 = 42;
pub const UID: u32 = 1000;
pub const GID: u32 = 100;

impl FakeSpank {
    pub fn new(context: Context) -> Self {
        FakeSpank {
            context,
            args: vec!["agent=/opt/syndeo-agent".into(), "runtime_base=/run/syndeo".into()],
            option: None,
            step: 0,
            conf: RunningConf { contain: true, ..RunningConf::default() },
            env: RefCell::default(),
            control_env: RefCell::default(),
            argv0: RefCell::new("python3".into()),
            registered: RefCell::new(false),
            log: RefCell::default(),
        }
    }

    pub fn env(&self, name: &str) -> Option<String> {
        self.env.borrow().get(name).cloned()
    }

    pub fn set_env(&self, name: &str, value: &str) {
        self.env.borrow_mut().insert(name.into(), value.into());
    }

    /// The log lines at `level` ("error", "info", "verbose").
    pub fn logged(&self, level: &str) -> Vec<String> {
        let prefix = format!("{level}: ");
        self.log.borrow().iter().filter_map(|l| l.strip_prefix(&prefix).map(str::to_string)).collect()
    }

    fn push_log(&self, level: &str, msg: &str) {
        self.log.borrow_mut().push(format!("{level}: {msg}"));
    }
}

impl Spank for FakeSpank {
    fn args(&self) -> &[String] {
        &self.args
    }
    fn context(&self) -> Context {
        self.context
    }
    fn register_option(&self) -> Result<(), SpankError> {
        *self.registered.borrow_mut() = true;
        Ok(())
    }
    fn option_value(&self) -> Option<Option<String>> {
        self.option.clone()
    }
    fn job_id(&self) -> Result<u32, SpankError> {
        Ok(JOB)
    }
    fn step_id(&self) -> Result<u32, SpankError> {
        Ok(self.step)
    }
    fn uid(&self) -> Result<u32, SpankError> {
        Ok(UID)
    }
    fn gid(&self) -> Result<u32, SpankError> {
        Ok(GID)
    }
    fn getenv(&self, name: &str) -> Result<Option<String>, SpankError> {
        Ok(self.env(name))
    }
    fn setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        self.set_env(name, value);
        Ok(())
    }
    fn unsetenv(&self, name: &str) -> Result<(), SpankError> {
        self.env.borrow_mut().remove(name);
        Ok(())
    }
    fn job_control_setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        self.control_env.borrow_mut().insert(name.into(), value.into());
        Ok(())
    }
    fn job_control_unsetenv(&self, name: &str) -> Result<(), SpankError> {
        self.control_env.borrow_mut().remove(name);
        Ok(())
    }
    fn replace_task_program(&self, program: &str) -> Result<String, SpankError> {
        Ok(self.argv0.replace(program.to_string()))
    }
    fn log_error(&self, msg: &str) {
        self.push_log("error", msg)
    }
    fn log_info(&self, msg: &str) {
        self.push_log("info", msg)
    }
    fn log_verbose(&self, msg: &str) {
        self.push_log("verbose", msg)
    }
    fn running_conf(&self) -> RunningConf {
        self.conf.clone()
    }
    /// Each comma-separated name, at `10.0.0.N` for its position N.
    fn node_addresses(&self, hostlist: &str) -> Vec<(String, Option<String>)> {
        let names = hostlist.split(',').filter(|n| !n.is_empty());
        names.enumerate().map(|(i, n)| (n.to_string(), Some(format!("10.0.0.{}", i + 1)))).collect()
    }
    fn adopt_into_extern_step(&self, _job: u32, _pid: i32) -> Result<(), String> {
        unreachable!("hooks adopt only through Node::start")
    }
}

/// One `syndeo-agent` run a hook asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The verb and the arguments after it.
    pub args: Vec<String>,
    /// The variables set on the command (after its env_clear).
    pub env: BTreeMap<String, String>,
    pub input: Option<String>,
    /// `Some(adopt)` for `start`.
    pub adopt: Option<bool>,
}

impl Run {
    pub fn verb(&self) -> &str {
        &self.args[0]
    }
    pub fn has(&self, arg: &str) -> bool {
        self.args.iter().any(|a| a == arg)
    }
}

/// What the agent does when run: exit with this status, after this stderr.
pub enum Script {
    Exit(i32, &'static str),
    Missing,
}

#[derive(Default)]
pub struct FakeNode {
    /// This process's environment.
    pub env: BTreeMap<String, String>,
    pub removed_env: RefCell<Vec<String>>,
    pub files: BTreeMap<PathBuf, String>,
    pub existing: BTreeSet<PathBuf>,
    /// The node agent's answer to `wait` (None: the test says no wait may happen).
    pub wait: Option<Result<WaitReply, String>>,
    pub waited: RefCell<u32>,
    /// What each agent run does, in turn; exit 0 once they are used up.
    pub scripts: RefCell<VecDeque<Script>>,
    pub runs: RefCell<Vec<Run>>,
}

impl FakeNode {
    pub fn with_paths(paths: &[&str]) -> Self {
        FakeNode { existing: paths.iter().map(PathBuf::from).collect(), ..FakeNode::default() }
    }

    pub fn runs(&self) -> Vec<Run> {
        self.runs.borrow().clone()
    }

    fn ran(&self, cmd: &Command, input: Option<&str>, adopt: Option<bool>) -> Result<Finished, RunError> {
        assert_eq!(cmd.get_program(), "/opt/syndeo-agent", "hooks run the configured agent only");
        let args = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let env = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_string_lossy().into_owned(), v?.to_string_lossy().into_owned())))
            .collect();
        self.runs.borrow_mut().push(Run { args, env, input: input.map(str::to_string), adopt });
        match self.scripts.borrow_mut().pop_front().unwrap_or(Script::Exit(0, "")) {
            Script::Exit(code, stderr) => {
                Ok(Finished { status: ExitStatus::from_raw(code << 8), stderr: stderr.to_string() })
            }
            Script::Missing => Err(RunError::Spawn(std::io::ErrorKind::NotFound.into())),
        }
    }
}

impl Node for FakeNode {
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
    fn remove_env(&self, name: &str) {
        self.removed_env.borrow_mut().push(name.into());
    }
    fn read(&self, path: &Path) -> String {
        self.files.get(path).cloned().unwrap_or_default()
    }
    fn exists(&self, path: &Path) -> bool {
        self.existing.contains(path)
    }
    fn wait_ready(&self, _dir: &JobDir, _timeout: Duration) -> Result<WaitReply, String> {
        *self.waited.borrow_mut() += 1;
        self.wait.clone().expect("this test does not expect a wait on the agent")
    }
    fn run(&self, cmd: Command, input: Option<&str>, _limit: Duration) -> Result<Finished, RunError> {
        self.ran(&cmd, input, None)
    }
    fn start(&self, cmd: Command, _job: u32, adopt: bool, _limit: Duration) -> Result<Finished, RunError> {
        self.ran(&cmd, None, Some(adopt))
    }
}
