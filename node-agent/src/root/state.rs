//! Root's own record of a job on this node, in a directory only root can
//! read or write (`<runtime base>/.jobs/<job>/`): the job's spec and secret,
//! written by the prolog and read by `start` and the epilog, and the record
//! of the supervisor `start` started. Nothing the job's user can write is
//! ever read by root as its own state: the agent gets the spec and secret
//! in a sealed memory file (see `start.rs`), never this directory.
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::dirs::{ensure_root_base, open_dir_nofollow, remove_in_root_base};
pub use crate::job::JobState;
use anyhow::{bail, Context, Result};
use nix::fcntl::OFlag;

pub use syndeo_protocol::layout::JOBS_DIR;
use syndeo_protocol::layout::{state_dir, STATE_SECRET as SECRET, STATE_SPEC as SPEC, STATE_SUPERVISOR as SUPERVISOR};

/// A process root started, known by PID and start time (a reused PID is
/// never mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcRecord {
    pub pid: i32,
    pub start_time: u64,
}

/// Root's state directory of one job.
pub struct StateDir {
    dir: File,
    path: PathBuf,
}

impl StateDir {
    /// Creates it (replacing any left by an earlier run of the same job id).
    pub fn create(runtime_base: &Path, job: u32) -> Result<StateDir> {
        let jobs = runtime_base.join(JOBS_DIR);
        ensure_root_base(&jobs, 0o700)?;
        remove_in_root_base(&jobs, &job.to_string())?;
        let path = state_dir(runtime_base, job);
        std::fs::DirBuilder::new().create(&path).with_context(|| format!("creating {}", path.display()))?;
        StateDir::open(runtime_base, job)?.context("the state directory vanished")
    }

    /// The job's state directory, if the prolog made one. Refused (an
    /// error) unless root owns it and only root can enter it.
    pub fn open(runtime_base: &Path, job: u32) -> Result<Option<StateDir>> {
        let path = state_dir(runtime_base, job);
        let dir = match open_dir_nofollow(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => bail!("{}: {e}", path.display()),
        };
        let meta = dir.metadata()?;
        let jobs = std::fs::symlink_metadata(runtime_base.join(JOBS_DIR))?;
        if meta.uid() != 0 || jobs.uid() != 0 || jobs.mode() & 0o077 != 0 {
            bail!("{} is not root's alone; refusing to use it", path.display());
        }
        Ok(Some(StateDir { dir, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&self, name: &str, content: &[u8]) -> Result<()> {
        let path = self.at(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .with_context(|| format!("writing {}", self.path.join(name).display()))?;
        f.write_all(content)?;
        Ok(())
    }

    fn read(&self, name: &str) -> Result<Option<String>> {
        let f = std::fs::OpenOptions::new().read(true).custom_flags(OFlag::O_NOFOLLOW.bits()).open(self.at(name));
        let mut f = match f {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.join(name).display())),
        };
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        Ok(Some(text))
    }

    /// A path inside the opened directory, resolved through its descriptor.
    fn at(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.dir.as_raw_fd()))
    }

    pub fn save(&self, state: &JobState) -> Result<()> {
        self.write(SPEC, serde_json::to_string_pretty(&state.spec)?.as_bytes())?;
        self.write(SECRET, state.secret.as_bytes())
    }

    pub fn load(&self) -> Result<JobState> {
        let spec = self.read(SPEC)?.with_context(|| format!("{} has no {SPEC}", self.path.display()))?;
        let secret = self.read(SECRET)?.with_context(|| format!("{} has no {SECRET}", self.path.display()))?;
        let spec = serde_json::from_str(&spec).with_context(|| format!("reading {}/{SPEC}", self.path.display()))?;
        Ok(JobState { spec, secret: secret.trim().to_string() })
    }

    pub fn record_supervisor(&self, r: ProcRecord) -> Result<()> {
        self.write(SUPERVISOR, format!("{} {}\n", r.pid, r.start_time).as_bytes())
    }

    pub fn supervisor(&self) -> Option<ProcRecord> {
        let text = self.read(SUPERVISOR).ok()??;
        let mut it = text.split_whitespace();
        Some(ProcRecord { pid: it.next()?.parse().ok()?, start_time: it.next()?.parse().ok()? })
    }

    /// Removes the whole state directory.
    pub fn remove(runtime_base: &Path, job: u32) -> Result<()> {
        remove_in_root_base(&runtime_base.join(JOBS_DIR), &job.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_the_supervisor_record_is_read_back() {
        let base = tempfile::tempdir().unwrap();
        let spec = crate::job::simulated_spec(42, &["n1"], 0);
        let dir = StateDir::create(base.path(), 42).unwrap();
        dir.save(&JobState { spec: spec.clone(), secret: "abc".into() }).unwrap();
        dir.record_supervisor(ProcRecord { pid: 7, start_time: 99 }).unwrap();
        let again = StateDir::open(base.path(), 42).unwrap().unwrap();
        let state = again.load().unwrap();
        assert_eq!((state.spec, state.secret.as_str()), (spec, "abc"));
        assert_eq!(again.supervisor(), Some(ProcRecord { pid: 7, start_time: 99 }));
        StateDir::remove(base.path(), 42).unwrap();
        assert!(StateDir::open(base.path(), 42).unwrap().is_none());
    }
}
