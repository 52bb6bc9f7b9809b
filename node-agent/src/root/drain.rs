//! Draining this node for a node fault the prolog found (a runtime base it
//! cannot write, a missing site key), with a reason that names it. Slurm
//! would drain the node anyway when the prolog fails, as "Prolog error";
//! it keeps a reason set before that. A user's mistake never comes here.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Slurm keeps reasons short in `sinfo -R`; the whole cause is in slurmd's log.
const REASON_MAX: usize = 200;

/// `scontrol update NodeName=NODE State=DRAIN Reason="syndeo: CAUSE"` (no
/// shell), waiting at most 10 s. Failures are only reported: Slurm drains
/// the node in any case.
pub fn drain(node: &str, cause: &str) {
    let reason = reason(cause);
    let mut cmd = Command::new("scontrol");
    cmd.args(["update", &format!("NodeName={node}"), "State=DRAIN", &format!("Reason={reason}")])
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Ok(conf) = std::env::var("SLURM_CONF") {
        cmd.env("SLURM_CONF", conf);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return eprintln!("cannot run scontrol to drain {node}: {e}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return eprintln!("drained {node}: {reason}"),
            Ok(Some(s)) => return eprintln!("scontrol could not drain {node} ({s})"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return eprintln!("scontrol did not drain {node} within 10 s");
            }
        }
    }
}

/// One line, "syndeo: " first, at most REASON_MAX characters.
fn reason(cause: &str) -> String {
    let line: String = format!("syndeo: {}", cause.split_whitespace().collect::<Vec<_>>().join(" "));
    match line.char_indices().nth(REASON_MAX) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_one_short_line_that_says_it_is_syndeos() {
        assert_eq!(
            reason("node fault:\n  creating /run/syndeo/7: Read-only file system"),
            "syndeo: node fault: creating /run/syndeo/7: Read-only file system"
        );
        let long = reason(&"x".repeat(500));
        assert!(long.starts_with("syndeo: xxx") && long.ends_with("...") && long.chars().count() == REASON_MAX + 3);
    }
}
