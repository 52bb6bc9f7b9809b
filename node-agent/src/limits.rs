//! The job's resource limits and umask, so that syndeo's processes run under
//! the same ones as the job's own tasks, not slurmd's. Slurm gives its tasks
//! the limits of the process that submitted the job (PropagateResourceLimits,
//! by default all of them) and its umask; the plugin records those at submit
//! (in the job's SPANK environment) and the supervisor applies them after it
//! has dropped to the user: it can lower limits, never raise one above what
//! the node gives.
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use serde::{Deserialize, Serialize};
use syndeo_protocol::rlimits::{self, Limit, KINDS};

/// The kernel's resource of each limit Slurm propagates, in the order of
/// `syndeo_protocol::rlimits::KINDS` (which names them).
const RESOURCES: [Resource; KINDS.len()] = [
    Resource::RLIMIT_CPU,
    Resource::RLIMIT_FSIZE,
    Resource::RLIMIT_DATA,
    Resource::RLIMIT_STACK,
    Resource::RLIMIT_CORE,
    Resource::RLIMIT_RSS,
    Resource::RLIMIT_NPROC,
    Resource::RLIMIT_NOFILE,
    Resource::RLIMIT_MEMLOCK,
    Resource::RLIMIT_AS,
];

/// The kernel's resource of the limit Slurm calls `name`.
fn resource(name: &str) -> Option<Resource> {
    KINDS.iter().position(|k| k.name == name).map(|i| RESOURCES[i])
}

/// `u64::MAX` is "unlimited".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLimits {
    /// (name, soft, hard) for each limit to apply.
    pub rlimits: Vec<(String, u64, u64)>,
    pub umask: Option<u32>,
}

impl JobLimits {
    /// Reads the plugin's record (`syndeo_protocol::rlimits`), keeping only
    /// the names in `propagate`. What does not parse is left out: the user
    /// wrote it (it is their own environment).
    pub fn parse(rlimits: Option<&str>, umask: Option<&str>, propagate: &[&str]) -> JobLimits {
        let rlimits = rlimits::parse_record(rlimits.unwrap_or(""))
            .into_iter()
            .filter(|l| propagate.contains(&l.name.as_str()))
            .map(|l| (l.name, l.soft, l.hard))
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
            let Some(res) = resource(name) else { continue };
            let Ok((_, node_hard)) = getrlimit(res) else { continue };
            let hard = (*hard).min(node_hard);
            let soft = (*soft).min(hard);
            if let Err(e) = setrlimit(res, soft, hard) {
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
    let limits: Vec<Limit> = KINDS
        .iter()
        .zip(RESOURCES)
        .filter_map(|(k, res)| getrlimit(res).ok().map(|(soft, hard)| Limit { name: k.name.into(), soft, hard }))
        .collect();
    rlimits::format_record(&limits)
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
    fn each_name_is_its_kernel_resource() {
        assert_eq!(resource("NOFILE"), Some(Resource::RLIMIT_NOFILE));
        assert_eq!(resource("AS"), Some(Resource::RLIMIT_AS));
        assert_eq!(resource("CPU"), Some(Resource::RLIMIT_CPU));
        assert_eq!(resource("BOGUS"), None);
        // RESOURCES goes by KINDS' positions: every entry, not a sample.
        for k in KINDS {
            let r = resource(k.name).unwrap_or_else(|| panic!("{} has no resource", k.name));
            assert_eq!(format!("{r:?}"), format!("RLIMIT_{}", k.name), "{} sits at another's position", k.name);
        }
    }

    #[test]
    fn this_processes_limits_round_trip_through_the_record() {
        let names: Vec<&str> = rlimits::names().collect();
        let l = JobLimits::parse(Some(&current_rlimits()), None, &names);
        assert_eq!(l.rlimits.len(), RESOURCES.len());
        assert!(l.apply().is_empty(), "applying the current limits changes nothing");
    }
}
