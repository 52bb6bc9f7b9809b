//! Slurm's settings syndeo depends on: `PrologFlags` (Contain puts the agent
//! and Ray in the job's cgroup; Alloc alone runs the prolog at allocation
//! but leaves them outside it; without either, the prolog runs too late),
//! and Slurm's cgroup plugins (the job's limits and accounting).
use super::slurm_conf::SlurmSettings;
use super::Check;

const SET_CONTAIN: &str = "set PrologFlags=Contain in slurm.conf (it implies Alloc), then `scontrol reconfigure` or \
                           restart slurmctld and slurmd";

/// `PrologFlags`: Contain (or RunInJob, which implies it) OK, Alloc alone WARN, neither FAIL.
pub fn prolog_flags(slurm: &SlurmSettings) -> Check {
    const NAME: &str = "prolog-flags";
    if !slurm.known {
        return Check::warn(NAME, format!("Slurm's settings are unknown: {}", slurm.source), SET_CONTAIN);
    }
    let value = slurm.get("PrologFlags").unwrap_or("none");
    let has = |f: &str| value.split(',').any(|v| v.trim().eq_ignore_ascii_case(f));
    let seen = format!("PrologFlags={value} (from {})", slurm.source);
    if has("Contain") || has("RunInJob") {
        Check::ok(NAME, seen)
    } else if has("Alloc") {
        Check::warn(
            NAME,
            format!("{seen}: without Contain, each job's agent and Ray run outside the job's cgroup, its limits and accounting"),
            SET_CONTAIN,
        )
    } else {
        Check::fail(
            NAME,
            format!("{seen}: without Alloc or Contain the prolog does not run at allocation, and syndeo jobs fail"),
            SET_CONTAIN,
        )
    }
}

/// Slurm's cgroup plugins: `ProctrackType=proctrack/cgroup` and `task/cgroup` in `TaskPlugin`.
pub fn cgroup_plugins(slurm: &SlurmSettings) -> Check {
    const NAME: &str = "cgroup-plugins";
    let fix = "set ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity in slurm.conf (with \
               cgroup.conf), then restart slurmctld and slurmd";
    if !slurm.known {
        return Check::warn(NAME, format!("Slurm's settings are unknown: {}", slurm.source), fix);
    }
    let proctrack = slurm.get("ProctrackType").unwrap_or("none");
    let task = slurm.get("TaskPlugin").unwrap_or("none");
    let seen = format!("ProctrackType={proctrack} TaskPlugin={task}");
    let task_cgroup = task.split(',').any(|t| matches!(t.trim(), "task/cgroup" | "cgroup"));
    let mut missing = vec![];
    if !matches!(proctrack, "proctrack/cgroup" | "cgroup") {
        missing.push("proctrack/cgroup");
    }
    if !task_cgroup {
        missing.push("task/cgroup");
    }
    if missing.is_empty() {
        Check::ok(NAME, seen)
    } else {
        let detail = format!(
            "{seen}: without {}, the job's CPU, memory and device limits do not hold for its Ray",
            missing.join(" and ")
        );
        Check::warn(NAME, detail, fix)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::Status;
    use super::*;

    fn with(key: &str, value: &str) -> SlurmSettings {
        let mut node = FakeNode::healthy();
        node.slurm_config.as_mut().unwrap().insert(key.into(), value.into());
        SlurmSettings::read(&node)
    }

    #[test]
    fn contain_is_ok_alloc_alone_warns_and_neither_fails() {
        assert_eq!(prolog_flags(&with("PrologFlags", "Alloc,Contain")).status, Status::Ok);
        assert_eq!(prolog_flags(&with("PrologFlags", "Contain,X11")).status, Status::Ok);
        assert_eq!(prolog_flags(&with("PrologFlags", "RunInJob")).status, Status::Ok);
        let alloc = prolog_flags(&with("PrologFlags", "Alloc"));
        assert!(alloc.status == Status::Warn && alloc.fix.as_deref().unwrap().contains("PrologFlags=Contain"));
        assert_eq!(prolog_flags(&with("PrologFlags", "(null)")).status, Status::Fail);
        assert_eq!(prolog_flags(&with("PrologFlags", "Serial")).status, Status::Fail);
    }

    #[test]
    fn unknown_settings_warn_rather_than_guess() {
        let mut node = FakeNode::healthy();
        node.slurm_config = Err("down".into());
        node.files.remove(std::path::Path::new("/etc/slurm/slurm.conf"));
        let s = SlurmSettings::read(&node);
        assert_eq!(prolog_flags(&s).status, Status::Warn);
        assert_eq!(cgroup_plugins(&s).status, Status::Warn);
    }

    #[test]
    fn both_cgroup_plugins_are_ok_and_either_missing_warns_naming_it() {
        assert_eq!(cgroup_plugins(&with("TaskPlugin", "task/affinity,task/cgroup")).status, Status::Ok);
        let c = cgroup_plugins(&with("TaskPlugin", "task/affinity"));
        assert!(c.status == Status::Warn && c.detail.contains("without task/cgroup"), "{c:?}");
        let c = cgroup_plugins(&with("ProctrackType", "proctrack/linuxproc"));
        assert!(c.status == Status::Warn && c.detail.contains("proctrack/cgroup"), "{c:?}");
    }
}
