//! What the job's cgroup allows this node's Ray, read by the agent (which
//! lives in the job's extern step when Slurm's cgroup plugins run): the CPUs
//! of its cpuset and the memory limit of the nearest cgroup that sets one.
//! Ray gets these (`--num-cpus`, `--memory`), and its container sees
//! that memory cgroup as its own `/sys/fs/cgroup/memory`, so that Ray's
//! memory monitor stops a task before the kernel's OOM killer would, and the
//! driver gets Ray's out-of-memory error. cgroup v1 and v2 both; on a node
//! without cgroup limits (no Slurm cgroup plugins) the memory is None and
//! the cpuset is the whole node's (Ray's CPUs are capped by Slurm's count,
//! `ray::ray_cpus`).
use std::path::{Path, PathBuf};

/// A limit above this is "no limit" (v1 says 9223372036854771712).
const UNLIMITED: u64 = 1 << 62;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobCgroup {
    /// The memory cgroup directory that sets the job's limit.
    pub memory_dir: Option<PathBuf>,
    /// Where a process reads its own memory cgroup (what Ray reads):
    /// `/sys/fs/cgroup/memory` (v1) or `/sys/fs/cgroup` (v2).
    pub memory_view: PathBuf,
    /// That limit, in MiB.
    pub memory_mb: Option<u64>,
    /// The CPUs of the cpuset this process may use.
    pub cpus: Option<u32>,
}

impl JobCgroup {
    /// This process's, from `/proc/self/cgroup` under `/sys/fs/cgroup`.
    pub fn of_this_process() -> JobCgroup {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        JobCgroup::from(&text, Path::new("/sys/fs/cgroup"))
    }

    pub fn from(proc_cgroup: &str, root: &Path) -> JobCgroup {
        let line = |ctl: &str| {
            proc_cgroup.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctls, path) = (f.next()?, f.next()?, f.next()?);
                (ctls.split(',').any(|c| c == ctl)).then(|| path.trim_start_matches('/').to_string())
            })
        };
        let v2 = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_start_matches('/').to_string());
        let (memory, cpus, view) = match line("memory") {
            Some(path) => (
                limiting(&root.join("memory"), &path, "memory.limit_in_bytes"),
                cpuset(&root.join("cpuset"), line("cpuset")),
                "/sys/fs/cgroup/memory",
            ),
            None => match v2 {
                Some(path) => (limiting(root, &path, "memory.max"), cpuset(root, Some(path)), "/sys/fs/cgroup"),
                None => (None, None, "/sys/fs/cgroup"),
            },
        };
        let (memory_dir, memory_mb) = match memory {
            Some((dir, bytes)) => (Some(dir), Some(bytes >> 20)),
            None => (None, None),
        };
        JobCgroup { memory_dir, memory_view: view.into(), memory_mb, cpus }
    }
}

/// The deepest directory from `base/path` up whose `file` sets a limit.
fn limiting(base: &Path, path: &str, file: &str) -> Option<(PathBuf, u64)> {
    let mut dir = base.join(path);
    loop {
        let value = std::fs::read_to_string(dir.join(file)).ok();
        if let Some(bytes) = value.and_then(|v| v.trim().parse::<u64>().ok()).filter(|b| *b < UNLIMITED) {
            return Some((dir, bytes));
        }
        if dir == base || !dir.pop() || !dir.starts_with(base) {
            return None;
        }
    }
}

/// The number of CPUs in the cpuset of `path` (or its nearest ancestor that says).
fn cpuset(base: &Path, path: Option<String>) -> Option<u32> {
    let mut dir = base.join(path?);
    loop {
        for file in ["cpuset.effective_cpus", "cpuset.cpus.effective", "cpuset.cpus"] {
            if let Some(n) = std::fs::read_to_string(dir.join(file)).ok().and_then(|t| count_cpus(t.trim())) {
                return Some(n);
            }
        }
        if dir == base || !dir.pop() || !dir.starts_with(base) {
            return None;
        }
    }
}

/// "0-3,8,10-11" has 7 CPUs; empty says nothing.
pub fn count_cpus(list: &str) -> Option<u32> {
    if list.is_empty() {
        return None;
    }
    let mut n = 0u32;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => part.parse::<u32>().map(|_| 1).ok()?,
        };
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpus("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpus("1"), Some(1));
        assert_eq!(count_cpus(""), None);
        assert_eq!(count_cpus("3-1"), None);
    }

    /// A cgroup v1 tree as Slurm makes it: the limit is set on the job, the
    /// task's own cgroup says "unlimited"; the job's directory is found.
    #[test]
    fn the_job_level_memory_limit_and_the_steps_cpuset_are_found_in_a_v1_tree() {
        let root = tempfile::tempdir().unwrap();
        let job = root.path().join("memory/slurm_n1/uid_1/job_7");
        std::fs::create_dir_all(job.join("step_extern/task_0")).unwrap();
        std::fs::write(job.join("memory.limit_in_bytes"), "1048576000\n").unwrap();
        std::fs::write(job.join("step_extern/memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(job.join("step_extern/task_0/memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let cpuset = root.path().join("cpuset/slurm_n1/uid_1/job_7/step_extern");
        std::fs::create_dir_all(&cpuset).unwrap();
        std::fs::write(cpuset.join("cpuset.cpus"), "0-1\n").unwrap();
        let proc = "6:freezer:/slurm_n1/uid_1/job_7/step_extern\n4:memory:/slurm_n1/uid_1/job_7/step_extern/task_0\n3:cpuset:/slurm_n1/uid_1/job_7/step_extern\n0::/\n";
        let cg = JobCgroup::from(proc, root.path());
        assert_eq!(cg.memory_dir.as_deref(), Some(job.as_path()));
        assert_eq!(cg.memory_mb, Some(1000));
        assert_eq!(cg.cpus, Some(2));
    }

    #[test]
    fn a_process_without_limits_has_none() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("memory")).unwrap();
        std::fs::write(root.path().join("memory/memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let cg = JobCgroup::from("4:memory:/\n", root.path());
        assert_eq!((cg.memory_dir, cg.memory_mb, cg.cpus), (None, None, None));
    }
}
