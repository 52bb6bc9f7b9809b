//! The start helper's hand-shake with the plugin: `syndeo-agent start
//! --hold` waits for the plugin's "go" line on its stdin (the plugin has
//! put it in the job's extern step by then), and answers with one
//! "supervisor PID" line on its stdout.

/// What the plugin writes on the helper's stdin once it may start.
pub const GO: &str = "go";
/// The start of the helper's reply line.
const SUPERVISOR: &str = "supervisor ";

/// The plugin's "go" line.
pub fn go_line() -> String {
    format!("{GO}\n")
}

/// Whether the line the helper read is the plugin's "go".
pub fn is_go(line: &str) -> bool {
    line.trim() == GO
}

/// The helper's reply: the supervisor's PID.
pub fn supervisor_line(pid: i32) -> String {
    format!("{SUPERVISOR}{pid}\n")
}

/// The supervisor's PID from the helper's reply, if it is one.
pub fn parse_supervisor_line(line: &str) -> Option<i32> {
    line.strip_prefix(SUPERVISOR).and_then(|p| p.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_and_the_supervisor_line_read_back() {
        assert!(is_go(&go_line()) && is_go("go") && !is_go("") && !is_go("stop\n"));
        assert_eq!(supervisor_line(4242), "supervisor 4242\n");
        assert_eq!(parse_supervisor_line(&supervisor_line(4242)), Some(4242));
        assert_eq!(parse_supervisor_line("supervisor x\n"), None);
        assert_eq!(parse_supervisor_line(""), None);
    }
}
