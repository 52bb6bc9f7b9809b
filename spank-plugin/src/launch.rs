//! Where a job's node agent starts, and what of the job's limits it takes,
//! from the running Slurm's configuration. One place for what differs
//! between site configurations and Slurm releases:
//!
//! | Slurm's PrologFlags | the agent starts in | so it lives in |
//! |---|---|---|
//! | Contain (and not RunInJob) | the job's extern step (`task_post_fork` there) | the job's cgroups |
//! | RunInJob (23.11 and later) | the prolog, which runs inside the extern step | the job's cgroups |
//! | neither | the prolog | slurmd's cgroups: no job limits apply |
//!
//! In the first two rows the plugin adds the start helper to the extern
//! step before it starts anything, as pam_slurm_adopt does with a login.
use crate::spank::RunningConf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// From the extern step's `task_post_fork`, adopted into it.
    ExternStep,
    /// From the prolog, adopted into the extern step (RunInJob).
    PrologAdopted,
    /// From the prolog; no extern step exists.
    Prolog,
}

pub fn launch(conf: &RunningConf) -> Launch {
    if conf.run_in_job {
        Launch::PrologAdopted
    } else if conf.contain {
        Launch::ExternStep
    } else {
        Launch::Prolog
    }
}

/// The limits Slurm propagates to a job's tasks (`PropagateResourceLimits`,
/// all by default, or all but `PropagateResourceLimitsExcept`), by name.
pub fn propagated(conf: &RunningConf) -> Vec<&'static str> {
    let all = || syndeo_protocol::rlimits::names();
    let names = |s: &str| -> Vec<String> { s.split(',').map(|n| n.trim().to_ascii_uppercase()).collect() };
    if let Some(except) = conf.propagate_except.as_deref().filter(|s| !s.is_empty()) {
        let except = names(except);
        return all().filter(|n| !except.iter().any(|e| e == n)).collect();
    }
    match conf.propagate.as_deref().map(names) {
        None => all().collect(),
        Some(list) if list.iter().any(|n| n == "ALL") => all().collect(),
        Some(list) => all().filter(|n| list.iter().any(|l| l == n)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(contain: bool, run_in_job: bool, propagate: Option<&str>, except: Option<&str>) -> RunningConf {
        RunningConf {
            contain,
            run_in_job,
            propagate: propagate.map(str::to_string),
            propagate_except: except.map(str::to_string),
        }
    }

    #[test]
    fn the_agent_starts_in_the_extern_step_whenever_slurm_has_one() {
        assert_eq!(launch(&conf(true, false, None, None)), Launch::ExternStep);
        assert_eq!(launch(&conf(true, true, None, None)), Launch::PrologAdopted);
        assert_eq!(launch(&conf(false, false, None, None)), Launch::Prolog);
    }

    #[test]
    fn propagated_limits_follow_slurms_two_settings() {
        assert_eq!(propagated(&conf(false, false, None, None)).len(), 10);
        assert_eq!(propagated(&conf(false, false, Some("ALL"), None)).len(), 10);
        assert_eq!(propagated(&conf(false, false, Some("NONE"), None)), Vec::<&str>::new());
        assert_eq!(propagated(&conf(false, false, Some("nofile,CORE"), None)), ["CORE", "NOFILE"]);
        let except = propagated(&conf(false, false, None, Some("MEMLOCK")));
        assert!(except.len() == 9 && !except.contains(&"MEMLOCK"));
    }
}
