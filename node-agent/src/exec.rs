//! The exec wrapper for `srun --syndeo CMD`. The plugin's `task_init` made
//! this binary the task's program and put the original program in
//! `SYNDEO_EXEC_ARGV0`; here, as the user, we ask the node's agent for the
//! container command line and exec it with CMD appended, keeping the task's
//! environment (RAY_ADDRESS and Slurm's variables included).
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::json;

use crate::job::SOCKET_FILE;

pub const EXEC_ARGV0_ENV: &str = "SYNDEO_EXEC_ARGV0";
pub const EXEC_JOB_DIR_ENV: &str = "SYNDEO_EXEC_JOB_DIR";
/// Set by the plugin when the job's cluster failed: the cause, for the job's stderr.
pub const EXEC_ERROR_ENV: &str = "SYNDEO_EXEC_ERROR";

pub fn run_wrapper(argv0: String) -> ExitCode {
    if let Ok(msg) = std::env::var(EXEC_ERROR_ENV) {
        eprintln!("syndeo: {msg}");
        eprintln!("syndeo: {argv0} was not started; `syndeo logs` or the job dir's agent.log has details");
        return ExitCode::from(1);
    }
    let Some(dir) = std::env::var_os(EXEC_JOB_DIR_ENV).map(PathBuf::from) else {
        eprintln!("syndeo: srun --syndeo: {EXEC_JOB_DIR_ENV} is not set");
        return ExitCode::from(127);
    };
    let mut argv = vec![OsString::from(argv0)];
    argv.extend(std::env::args_os().skip(1));
    let err = exec_in_image(&dir, &argv);
    eprintln!("syndeo: srun --syndeo: {err:#}");
    ExitCode::from(127)
}

/// Replaces this process with `argv` run in the job's image (the node's agent
/// at `job_dir` gives the container command), keeping the environment
/// (RAY_ADDRESS and Slurm's variables included). Returns only on failure.
pub fn exec_in_image(job_dir: &Path, argv: &[OsString]) -> anyhow::Error {
    let cwd = std::env::current_dir().ok();
    let reply = match crate::agent::local_request(
        &job_dir.join(SOCKET_FILE),
        &json!({ "op": "exec_spec", "cwd": cwd }),
        Duration::from_secs(30),
    ) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if let Some(e) = reply.get("error").and_then(|e| e.as_str()) {
        return anyhow::anyhow!("{e}");
    }
    let prefix: Vec<String> = match reply.get("argv").and_then(|a| serde_json::from_value(a.clone()).ok()) {
        Some(a) => a,
        None => return anyhow::anyhow!("bad answer from the node agent: {reply}"),
    };
    let Some((program, rest)) = prefix.split_first() else { return anyhow::anyhow!("empty container command") };
    let err =
        Command::new(program).args(rest).args(argv).env_remove(EXEC_ARGV0_ENV).env_remove(EXEC_JOB_DIR_ENV).exec();
    anyhow::anyhow!("cannot run {program}: {err}")
}
