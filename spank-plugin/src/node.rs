//! What the hooks do on the node beside Slurm: read their own process's
//! environment and files, look for paths, ask the node agent's socket, and
//! run `syndeo-agent`. The [`Node`] trait is what the hooks see; the real
//! one is `system::System`, and the hooks' tests use a fake.
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::WaitReply;

/// How a `syndeo-agent` run ended.
pub struct Finished {
    pub status: ExitStatus,
    /// The agent's stderr (capped; see `child.rs`).
    pub stderr: String,
}

/// Why the agent did not finish.
#[derive(Debug)]
pub enum RunError {
    Spawn(std::io::Error),
    TimedOut(Duration),
    Wait(std::io::Error),
}

pub trait Node {
    /// A variable of this process's environment (in the prolog and epilog:
    /// Slurm's `SPANK_*` and `SLURM_*`).
    fn env(&self, name: &str) -> Option<String>;
    /// Removes a variable from this process's environment.
    fn remove_env(&self, name: &str);
    /// A file's text; empty when it cannot be read.
    fn read(&self, path: &Path) -> String;
    fn exists(&self, path: &Path) -> bool;
    /// Asks the node agent of `dir` until its cluster is ready, failed, or
    /// `timeout` passed.
    fn wait_ready(&self, dir: &JobDir, timeout: Duration) -> Result<WaitReply, String>;
    /// Runs `cmd` (`syndeo-agent VERB`, its stderr piped) to its end within
    /// `limit`; with `input`, that goes to its stdin.
    fn run(&self, cmd: Command, input: Option<&str>, limit: Duration) -> Result<Finished, RunError>;
    /// Runs `cmd` (`syndeo-agent start --hold`) within `limit`. With
    /// `adopt`, the helper is added to job `job`'s extern step before it
    /// starts anything, and so is the supervisor it starts.
    fn start(&self, cmd: Command, job: u32, adopt: bool, limit: Duration) -> Result<Finished, RunError>;
}
