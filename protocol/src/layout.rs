//! Where syndeo's files are: the installed defaults, and the layout of a
//! job's directory on a node (`<runtime base>/<job id>`, the user's, 0700).
use std::path::{Path, PathBuf};

/// The agent binary the package installs (root-owned).
pub const DEFAULT_AGENT: &str = "/usr/libexec/syndeo/syndeo-agent";
/// The site configuration the package installs.
pub const DEFAULT_CONFIG: &str = "/etc/syndeo/syndeo.toml";
/// The root-owned directory holding one runtime directory per job.
pub const DEFAULT_RUNTIME_BASE: &str = "/run/syndeo";
/// Root's directory of failure notes, under the runtime base: root-owned,
/// mode 0711 (no user can create, rename or list anything there; each note
/// is its job user's to read).
pub const NOTES_DIR: &str = ".notes";
/// Root's directory of per-job state, under the runtime base: one
/// directory per job, `<runtime base>/.jobs/<job id>`, root's alone (0700).
pub const JOBS_DIR: &str = ".jobs";
/// In a job's state directory: the job's spec (JSON), written by the prolog.
pub const STATE_SPEC: &str = "spec.json";
/// In a job's state directory: the job's secret.
pub const STATE_SECRET: &str = "secret";
/// In a job's state directory: the record of the supervisor `start` started.
pub const STATE_SUPERVISOR: &str = "supervisor";

/// Root's state directory of job `job`: `<runtime_base>/.jobs/<job>`.
pub fn state_dir(runtime_base: &Path, job: u32) -> PathBuf {
    runtime_base.join(JOBS_DIR).join(job.to_string())
}

/// The spec the prolog left for job `job`: whether the prolog prepared it.
pub fn state_spec(runtime_base: &Path, job: u32) -> PathBuf {
    state_dir(runtime_base, job).join(STATE_SPEC)
}

/// One job's runtime directory on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDir(PathBuf);

impl JobDir {
    /// `<runtime_base>/<job_id>`.
    pub fn new(runtime_base: &Path, job_id: u32) -> JobDir {
        JobDir(runtime_base.join(job_id.to_string()))
    }

    /// A job directory at a path named elsewhere (an environment variable).
    pub fn at(path: impl Into<PathBuf>) -> JobDir {
        JobDir(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The node agent's local socket (see [`crate::local`]).
    pub fn socket(&self) -> PathBuf {
        self.0.join("agent.sock")
    }

    /// Left by the root side, in place of an agent, when the job cannot have
    /// a cluster on this node: the reason, for the job's steps. It lies in
    /// root's notes directory beside the job directory
    /// (`<runtime base>/.notes/<job id>`), never in the job directory, where
    /// the user could make that name first.
    pub fn failed_note(&self) -> PathBuf {
        let name = self.0.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let base = self.0.parent().unwrap_or(Path::new("/"));
        base.join(NOTES_DIR).join(name)
    }

    /// The node agent's log.
    pub fn agent_log(&self) -> PathBuf {
        self.0.join("agent.log")
    }

    /// What this node's Ray container printed.
    pub fn ray_log(&self) -> PathBuf {
        self.0.join("ray.log")
    }

    /// The cluster's Ray token (0600), for the user's own tools.
    pub fn ray_token(&self) -> PathBuf {
        self.0.join("ray_token")
    }

    /// First on the job steps' PYTHONPATH: syndeo's `sitecustomize.py`,
    /// which warns a host driver whose Ray differs from the cluster's, and
    /// `syndeo_cluster.json`, the cluster's Ray and Python versions.
    pub fn python_hook(&self) -> PathBuf {
        self.0.join("python")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_dir_is_the_job_id_under_the_runtime_base() {
        let d = JobDir::new(Path::new("/run/syndeo"), 42);
        assert_eq!(d.path(), Path::new("/run/syndeo/42"));
        assert_eq!(d.socket(), PathBuf::from("/run/syndeo/42/agent.sock"));
        assert_eq!(d.failed_note(), PathBuf::from("/run/syndeo/.notes/42"));
        assert_eq!(JobDir::at("/run/syndeo/42/").failed_note(), PathBuf::from("/run/syndeo/.notes/42"));
    }

    #[test]
    fn roots_record_of_a_job_is_under_dot_jobs() {
        assert_eq!(state_dir(Path::new("/run/syndeo"), 42), PathBuf::from("/run/syndeo/.jobs/42"));
        assert_eq!(state_spec(Path::new("/run/syndeo"), 42), PathBuf::from("/run/syndeo/.jobs/42/spec.json"));
    }
}
