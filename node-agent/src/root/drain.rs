//! Draining this node for a node fault the prolog found (a runtime base it
//! cannot write, a missing site key), with a reason that names it. Slurm
//! would drain the node anyway when the prolog fails, as "Prolog error";
//! it keeps a reason set before that. A user's mistake never comes here.
use std::time::Duration;

/// Slurm keeps reasons short in `sinfo -R`; the whole cause is in slurmd's log.
const REASON_MAX: usize = 200;

/// `scontrol update NodeName=NODE State=DRAIN Reason="syndeo: CAUSE"` (no
/// shell), waiting at most 10 s. Failures are only reported: Slurm drains
/// the node in any case.
pub fn drain(node: &str, cause: &str) {
    let reason = reason(cause);
    let args = ["update", &format!("NodeName={node}"), "State=DRAIN", &format!("Reason={reason}")];
    match super::slurm_client::run("scontrol", &args, Duration::from_secs(10)) {
        Ok(_) => eprintln!("drained {node}: {reason}"),
        Err(e) => eprintln!("scontrol could not drain {node}: it {e}"),
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
