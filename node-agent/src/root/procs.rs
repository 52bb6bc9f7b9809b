//! Finding a job's processes through /proc: a process is identified by PID
//! and start time (so a reused PID is never mistaken for it), and a job's
//! processes are those of the job user that carry the job's marker variable
//! or belong to the agent's session.
use std::path::Path;

/// The fields of /proc/PID/stat that matter here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcStat {
    pub pid: i32,
    /// R, S, D (uninterruptible: in the kernel, perhaps in a hung FUSE mount), Z, ...
    pub state: char,
    pub session: i32,
    pub start_time: u64,
}

pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Parses /proc/PID/stat; the command name may contain spaces and ')'.
pub fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): session is field 6, starttime field 22.
    let state = f.first()?.chars().next()?;
    Some(ProcStat { pid, state, session: f.get(3)?.parse().ok()?, start_time: f.get(19)?.parse().ok()? })
}

/// `pid 1234 (state D)`, for a log line about a process that will not go.
pub fn describe(pid: i32) -> String {
    match stat(pid) {
        Some(s) => format!("pid {pid} (state {})", s.state),
        None => format!("pid {pid} (gone)"),
    }
}

/// The process's real uid, from /proc/PID/status (not the owner of
/// /proc/PID, which is root for a process that is not dumpable, as every
/// syndeo-agent of the user's is).
pub fn uid_of(pid: i32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_uid(&text)
}

/// The real uid on the `Uid:` line of a /proc/PID/status.
fn parse_uid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// Whether the process's environment has `name=value` (root may read any).
pub fn has_env(pid: i32, name: &str, value: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
    let want = format!("{name}={value}");
    env.split(|&b| b == 0).any(|kv| kv == want.as_bytes())
}

pub fn all_pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(Path::new("/proc")) else { return vec![] };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// Processes of `uid` that carry the job marker or live in `session`, each
/// with its start time (read before and after the checks, so that all of
/// them are about one process, not a PID reused meanwhile).
pub fn job_processes(uid: u32, marker: (&str, &str), session: Option<i32>) -> Vec<ProcStat> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&p| p != me)
        .filter_map(|p| {
            let before = stat(p)?;
            let ours = uid_of(p) == Some(uid)
                && (session.is_some_and(|s| before.session == s) || has_env(p, marker.0, marker.1));
            (ours && stat(p)?.start_time == before.start_time).then_some(before)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let line = "1234 (ray::a (b) c) S 1 1234 1200 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 98765 1000 200";
        let s = parse_stat(1234, line).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!(s.session, 1200);
        assert_eq!(s.start_time, 98765);
    }

    #[test]
    fn the_uid_is_the_real_uid_of_the_status_file_whoever_owns_proc_pid() {
        assert_eq!(parse_uid("Name:\tx\nUid:\t1001\t1001\t1001\t1001\nGid:\t5\t5\t5\t5\n"), Some(1001));
        assert_eq!(parse_uid("Name:\tx\n"), None);
        assert_eq!(uid_of(std::process::id() as i32), Some(nix::unistd::getuid().as_raw()));
    }

    #[test]
    fn own_process_is_found_by_stat_and_env() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert!(s.start_time > 0);
        assert!(has_env(me, "PATH", &std::env::var("PATH").unwrap()));
        assert!(!has_env(me, "SYNDEO_NO_SUCH_VAR", "1"));
    }
}
