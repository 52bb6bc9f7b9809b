//! The exec wrapper for `srun --syndeo CMD`. The plugin's `task_init` made
//! this binary the task's program and put the original program in
//! `SYNDEO_EXEC_ARGV0`; here, as the user, we ask the node's agent for the
//! container command line and exec it with CMD appended, keeping the task's
//! environment (RAY_ADDRESS and Slurm's variables included).
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
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
    let fail = |msg: String| {
        eprintln!("syndeo: srun --syndeo: {msg}");
        ExitCode::from(127)
    };
    let Some(dir) = std::env::var_os(EXEC_JOB_DIR_ENV).map(PathBuf::from) else {
        return fail(format!("{EXEC_JOB_DIR_ENV} is not set"));
    };
    let cwd = std::env::current_dir().ok();
    let reply = match crate::agent::local_request(
        &dir.join(SOCKET_FILE),
        &json!({ "op": "exec_spec", "cwd": cwd }),
        Duration::from_secs(30),
    ) {
        Ok(r) => r,
        Err(e) => return fail(format!("{e:#}")),
    };
    if let Some(e) = reply.get("error").and_then(|e| e.as_str()) {
        return fail(e.to_string());
    }
    let argv: Vec<String> = match reply.get("argv").and_then(|a| serde_json::from_value(a.clone()).ok()) {
        Some(a) => a,
        None => return fail(format!("bad answer from the node agent: {reply}")),
    };
    let Some((program, prefix)) = argv.split_first() else { return fail("empty container command".into()) };
    let err = Command::new(program)
        .args(prefix)
        .arg(&argv0)
        .args(std::env::args_os().skip(1))
        .env_remove(EXEC_ARGV0_ENV)
        .env_remove(EXEC_JOB_DIR_ENV)
        .exec();
    fail(format!("cannot run {program}: {err}"))
}
