//! Runs one program for `check` (no shell), with a time limit: a hung
//! `scontrol` (slurmctld down) or a container that never starts costs a
//! bounded wait, never the whole command. Output is read while it runs, so a
//! talkative program cannot block on a full pipe.
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The PATH of every program `check` runs: the system's directories only.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs `cmd` to its end, or kills it after `limit` (an error).
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Output> {
    let what = format!("{:?}", cmd.get_program());
    tracing::debug!("running {cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {what}"))?;
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().with_context(|| format!("waiting for {what}"))? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A grandchild may still hold a pipe: its output is not waited for long.
    let collect = |rx: mpsc::Receiver<Vec<u8>>| rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
    Ok(Output { status, stdout: collect(stdout), stderr: collect(stderr) })
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.by_ref().take(4 << 20).read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

/// The last line a failed program wrote (stderr first), for a one-line report.
pub fn last_words(o: &Output) -> String {
    let pick = |b: &[u8]| String::from_utf8_lossy(b).lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string);
    pick(&o.stderr).or_else(|| pick(&o.stdout)).unwrap_or_else(|| format!("{} with no output", o.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_ends_gives_its_output() {
        let o = run_bounded(Command::new("echo").arg("hello"), Duration::from_secs(10)).unwrap();
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hello\n");
    }

    #[test]
    fn a_program_that_hangs_is_killed_at_the_limit() {
        let t = Instant::now();
        let e = run_bounded(Command::new("sleep").arg("30"), Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let e = run_bounded(&mut Command::new("/nonexistent/prog"), Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/prog"), "{e}");
    }

    #[test]
    fn last_words_prefer_stderr_and_skip_blank_lines() {
        let o = run_bounded(
            Command::new("sh").args(["-c", "echo out; echo err1 >&2; echo err2 >&2; echo >&2"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(last_words(&o), "err2");
    }
}
