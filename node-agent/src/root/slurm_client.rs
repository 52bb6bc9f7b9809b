//! Slurm's client commands (`scontrol`, `squeue`) as root-side code runs
//! them: no shell, a clean environment (PATH and the prolog's SLURM_CONF
//! only), stdin closed, and a deadline, after which the command is killed:
//! a slow controller must not hold a prolog past Slurm's own limits.
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a client command ended, when it did not succeed.
#[derive(Debug, PartialEq)]
pub enum ClientError {
    NotRun(String),
    Failed(String),
    TimedOut,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NotRun(e) => write!(f, "could not be run: {e}"),
            ClientError::Failed(e) => write!(f, "failed: {e}"),
            ClientError::TimedOut => write!(f, "did not answer in time"),
        }
    }
}

/// Runs `program args` and returns its standard output.
pub fn run(program: &str, args: &[&str], limit: Duration) -> Result<String, ClientError> {
    run_with(program, args, &[], limit)
}

/// `run`, with `env` added to the clean environment.
pub fn run_with(program: &str, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Result<String, ClientError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().copied())
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(conf) = std::env::var("SLURM_CONF") {
        cmd.env("SLURM_CONF", conf);
    }
    let mut child = cmd.spawn().map_err(|e| ClientError::NotRun(e.to_string()))?;
    // Read while it runs (a full pipe would stall it), at most 1 MiB.
    let reader = child.stdout.take().map(|o| {
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = o.take(1 << 20).read_to_string(&mut out);
            out
        })
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ClientError::TimedOut);
            }
        }
    };
    let out = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    let mut err = String::new();
    if let Some(e) = child.stderr.take() {
        let _ = e.take(4096).read_to_string(&mut err);
    }
    if status.success() {
        Ok(out)
    } else {
        Err(ClientError::Failed(format!("{status}: {}", err.trim())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_failure_and_a_missed_deadline_are_told_apart() {
        assert_eq!(run("/bin/echo", &["a b"], Duration::from_secs(5)), Ok("a b\n".into()));
        assert!(matches!(run("/bin/false", &[], Duration::from_secs(5)), Err(ClientError::Failed(_))));
        assert_eq!(run("/bin/sleep", &["5"], Duration::from_millis(100)), Err(ClientError::TimedOut));
    }

    #[test]
    fn a_missing_program_is_not_run_rather_than_failed() {
        assert!(matches!(run("/nonexistent/squeue", &[], Duration::from_secs(1)), Err(ClientError::NotRun(_))));
    }

    #[test]
    fn the_added_environment_reaches_the_command_and_nothing_else_does() {
        let out = run_with("/usr/bin/env", &[], &[("SLURM_TIME_FORMAT", "%s")], Duration::from_secs(5)).unwrap();
        assert!(out.lines().any(|l| l == "SLURM_TIME_FORMAT=%s"), "{out}");
        assert!(!out.lines().any(|l| l.starts_with("HOME=")), "the environment is not clean: {out}");
    }
}
