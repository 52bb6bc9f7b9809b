//! The exec wrapper for `srun --syndeo CMD`. The plugin's `task_init` made
//! this binary the task's program and put the original program in
//! `SYNDEO_EXEC_ARGV0`; here, as the user, we ask the node's agent for the
//! container command line and exec it with CMD appended, keeping the task's
//! environment (RAY_ADDRESS and Slurm's variables included).
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use syndeo_protocol::client::Client;
use syndeo_protocol::env::{EXEC_ARGV0, EXEC_ERROR, EXEC_JOB_DIR};
use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::ExecSpecReply;

pub fn run_wrapper(argv0: String) -> ExitCode {
    if let Ok(msg) = std::env::var(EXEC_ERROR) {
        eprintln!("syndeo: {msg}");
        eprintln!("syndeo: {argv0} was not started; `syndeo logs` or the job dir's agent.log has details");
        return ExitCode::from(1);
    }
    let Some(dir) = std::env::var_os(EXEC_JOB_DIR) else {
        eprintln!("syndeo: srun --syndeo: {EXEC_JOB_DIR} is not set");
        return ExitCode::from(127);
    };
    let mut argv = vec![OsString::from(argv0)];
    argv.extend(std::env::args_os().skip(1));
    let err = exec_in_image(&JobDir::at(dir), &argv);
    eprintln!("syndeo: srun --syndeo: {err:#}");
    ExitCode::from(127)
}

/// Replaces this process with `argv` run in the job's image (the node's agent
/// in `dir` gives the container command), keeping the environment
/// (RAY_ADDRESS and Slurm's variables included). Returns only on failure.
pub fn exec_in_image(dir: &JobDir, argv: &[OsString]) -> anyhow::Error {
    let cwd = std::env::current_dir().ok();
    let (prefix, runtime_env) = match Client::new(dir).exec_spec(cwd, Duration::from_secs(30)) {
        Ok(ExecSpecReply::Argv { argv, env }) => (argv, env),
        Ok(ExecSpecReply::Error { error }) => return anyhow::anyhow!("{error}"),
        Err(e) => return e.into(),
    };
    let Some((program, rest)) = prefix.split_first() else { return anyhow::anyhow!("empty container command") };
    let mut cmd = Command::new(program);
    cmd.args(rest).args(argv).env_remove(EXEC_ARGV0).env_remove(EXEC_JOB_DIR).envs(runtime_env);
    // The driver hook is for drivers on the host; the image has the cluster's Ray.
    match without_hook(std::env::var_os("PYTHONPATH"), &dir.python_hook()) {
        Some(p) => cmd.env("PYTHONPATH", p),
        None => cmd.env_remove("PYTHONPATH"),
    };
    if crate::exec_session::has_a_controlling_terminal() {
        match crate::exec_session::run_in_own_session(&cmd) {
            Ok(code) => std::process::exit(code),
            Err(e) => return e,
        }
    }
    let err = cmd.exec();
    anyhow::anyhow!("cannot run {program}: {err}")
}

/// PYTHONPATH without syndeo's driver hook directory; None if nothing is left.
fn without_hook(pythonpath: Option<OsString>, hook: &std::path::Path) -> Option<OsString> {
    let p = pythonpath?;
    let kept: Vec<_> = std::env::split_paths(&p).filter(|d| d != hook).collect();
    if kept.is_empty() {
        return None;
    }
    std::env::join_paths(kept).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_hook_leaves_pythonpath_and_the_users_own_paths_stay() {
        let hook = std::path::Path::new("/run/syndeo/7/python");
        assert_eq!(without_hook(Some("/run/syndeo/7/python".into()), hook), None);
        assert_eq!(without_hook(Some("/run/syndeo/7/python:/home/u/lib".into()), hook), Some("/home/u/lib".into()));
        assert_eq!(without_hook(None, hook), None);
    }
}
