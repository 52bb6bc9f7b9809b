//! The job's resource limits and umask, so that syndeo's processes run under
//! the same ones as the job's own tasks, not slurmd's. Slurm gives its tasks
//! the limits of the process that submitted the job (PropagateResourceLimits,
//! by default all of them) and its umask; the plugin records those at submit
//! (in the job's SPANK environment) and the supervisor applies them after it
//! has dropped to the user: it can lower limits, never raise one above what
//! the node gives.
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use serde::{Deserialize, Serialize};

/// The limits Slurm propagates, by the names `PropagateResourceLimits` uses.
pub const RESOURCES: &[(&str, Resource)] = &[
    ("CPU", Resource::RLIMIT_CPU),
    ("FSIZE", Resource::RLIMIT_FSIZE),
    ("DATA", Resource::RLIMIT_DATA),
    ("STACK", Resource::RLIMIT_STACK),
    ("CORE", Resource::RLIMIT_CORE),
    ("RSS", Resource::RLIMIT_RSS),
    ("NPROC", Resource::RLIMIT_NPROC),
    ("NOFILE", Resource::RLIMIT_NOFILE),
    ("MEMLOCK", Resource::RLIMIT_MEMLOCK),
    ("AS", Resource::RLIMIT_AS),
];

/// `u64::MAX` is "unlimited".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLimits {
    /// (name, soft, hard) for each limit to apply.
    pub rlimits: Vec<(String, u64, u64)>,
    pub umask: Option<u32>,
}

impl JobLimits {
    /// Reads the plugin's record, `NAME=SOFT:HARD,...` (numbers or
    /// "unlimited"), keeping only the names in `propagate`. What does not
    /// parse is left out: the user wrote it (it is their own environment).
    pub fn parse(rlimits: Option<&str>, umask: Option<&str>, propagate: &[&str]) -> JobLimits {
        let num = |v: &str| if v == "unlimited" { Some(u64::MAX) } else { v.parse().ok() };
        let rlimits = rlimits
            .unwrap_or("")
            .split(',')
            .filter_map(|item| {
                let (name, v) = item.split_once('=')?;
                let (soft, hard) = v.split_once(':')?;
                let name = name.trim().to_ascii_uppercase();
                if !RESOURCES.iter().any(|(n, _)| *n == name) || !propagate.contains(&name.as_str()) {
                    return None;
                }
                Some((name, num(soft)?, num(hard)?))
            })
            .collect();
        let umask = umask.and_then(|u| u32::from_str_radix(u.trim(), 8).ok()).filter(|u| *u <= 0o777);
        JobLimits { rlimits, umask }
    }

    /// Applies them to this process (after the drop to the user): each limit
    /// at most the node's (the current hard limit). Returns what could not
    /// be applied, for the log.
    pub fn apply(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (name, soft, hard) in &self.rlimits {
            let Some((_, res)) = RESOURCES.iter().find(|(n, _)| n == name) else { continue };
            let Ok((_, node_hard)) = getrlimit(*res) else { continue };
            let hard = (*hard).min(node_hard);
            let soft = (*soft).min(hard);
            if let Err(e) = setrlimit(*res, soft, hard) {
                problems.push(format!("{name}: {e}"));
            }
        }
        if let Some(m) = self.umask {
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
        }
        problems
    }
}

/// What this process has now, in the plugin's record format.
pub fn current_rlimits() -> String {
    let show = |v: u64| if v == u64::MAX { "unlimited".to_string() } else { v.to_string() };
    RESOURCES
        .iter()
        .filter_map(|(name, res)| getrlimit(*res).ok().map(|(s, h)| format!("{name}={}:{}", show(s), show(h))))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_parses_and_only_propagated_limits_are_kept() {
        let l = JobLimits::parse(
            Some("NOFILE=1024:4096,CORE=0:unlimited,MEMLOCK=64:64,BOGUS=1:1,NPROC=x:1"),
            Some("027"),
            &["NOFILE", "CORE", "NPROC"],
        );
        assert_eq!(l.rlimits, vec![("NOFILE".into(), 1024, 4096), ("CORE".into(), 0, u64::MAX)]);
        assert_eq!(l.umask, Some(0o027));
        assert_eq!(JobLimits::parse(None, Some("999"), &[]).umask, None);
    }

    #[test]
    fn this_processes_limits_round_trip_through_the_record() {
        let names: Vec<&str> = RESOURCES.iter().map(|(n, _)| *n).collect();
        let l = JobLimits::parse(Some(&current_rlimits()), None, &names);
        assert_eq!(l.rlimits.len(), RESOURCES.len());
        assert!(l.apply().is_empty(), "applying the current limits changes nothing");
    }
}
