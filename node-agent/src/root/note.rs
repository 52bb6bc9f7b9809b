//! The job's failure note on this node, written by root when the job cannot
//! have a cluster here (the prolog refused it, or `start` found no free mesh
//! port); the job's steps print it and fail, and the node stays in service.
//!
//! It lies in root's notes directory, `<runtime base>/.notes/<job id>`
//! (root's, mode 0711: a user can open a name they know, and can create,
//! rename, remove or list nothing there), never in the job's own directory,
//! where the job's user could make that name first (from another job of
//! theirs) and turn root's create into a failure, which would drain the node.
//! The note is written under a fresh random name, given to the job's user
//! (mode 0400: only they and root read it), then renamed into place.
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result};
use syndeo_protocol::layout::NOTES_DIR;

use super::dirs::{ensure_root_base, place_file, remove_in_root_base};

/// The notes directory's mode: others may traverse it, not list or write it.
const NOTES_MODE: u32 = 0o711;

/// Leaves `message` as job `job`'s note, readable by its user (`owner`, uid
/// and gid); a note left earlier for the same job id is replaced.
pub fn write(runtime_base: &Path, job: u32, owner: (u32, u32), message: &str) -> Result<()> {
    let dir = open_notes(runtime_base)?;
    let shown = runtime_base.join(NOTES_DIR).join(job.to_string());
    let random = crate::secret::random_token().context("random bytes")?;
    let temp = format!(".{job}.{}", &random[..16]);
    let result = place_file(&dir, &temp, &job.to_string(), owner, 0o400, format!("{message}\n").as_bytes());
    result.with_context(|| format!("writing the job's note {}", shown.display()))
}

/// Removes job `job`'s note, if any (the epilog; the prolog, for a job id
/// run again).
pub fn clear(runtime_base: &Path, job: u32) -> Result<()> {
    remove_in_root_base(&runtime_base.join(NOTES_DIR), &job.to_string())
}

/// The notes directory, made if missing; root's, mode 0711.
fn open_notes(runtime_base: &Path) -> Result<File> {
    ensure_root_base(runtime_base, 0o755)?;
    let path = runtime_base.join(NOTES_DIR);
    let dir = ensure_root_base(&path, NOTES_MODE)?;
    if dir.metadata()?.mode() & 0o7777 != NOTES_MODE {
        dir.set_permissions(std::fs::Permissions::from_mode(NOTES_MODE))
            .with_context(|| format!("chmod {}", path.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syndeo_protocol::client::read_failed_note;
    use syndeo_protocol::layout::JobDir;

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn base() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn the_note_lies_in_roots_notes_dir_is_the_users_to_read_and_the_steps_read_it() {
        if !root() {
            return; // ownership is root's to test
        }
        let d = base();
        write(d.path(), 42, (1234, 5678), "image /x does not exist").unwrap();
        let notes = std::fs::metadata(d.path().join(NOTES_DIR)).unwrap();
        assert_eq!((notes.uid(), notes.mode() & 0o7777), (0, NOTES_MODE));
        let jd = JobDir::new(d.path(), 42);
        let m = std::fs::symlink_metadata(jd.failed_note()).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 5678, 0o400));
        assert_eq!(read_failed_note(&jd).unwrap().as_deref(), Some("image /x does not exist"));
        let names: Vec<_> = std::fs::read_dir(d.path().join(NOTES_DIR)).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a temporary name was left behind");
    }

    /// The attack of issue 26: the user made `failed` (a file, a FIFO, a
    /// link) in their job directory first. It is not where root writes.
    #[test]
    fn names_the_user_made_first_in_the_job_directory_do_not_stop_the_note() {
        if !root() {
            return;
        }
        let d = base();
        let job = d.path().join("42");
        std::fs::create_dir(&job).unwrap();
        std::fs::write(job.join("failed"), "planted").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", job.join("agent.sock")).unwrap();
        write(d.path(), 42, (1234, 1234), "refused").unwrap();
        assert_eq!(read_failed_note(&JobDir::new(d.path(), 42)).unwrap().as_deref(), Some("refused"));
        assert_eq!(std::fs::read_to_string(job.join("failed")).unwrap(), "planted");
    }

    #[test]
    fn a_note_left_for_the_same_job_id_is_replaced_and_clear_removes_it() {
        if !root() {
            return;
        }
        let d = base();
        write(d.path(), 7, (1234, 1234), "first").unwrap();
        write(d.path(), 7, (1234, 1234), "second").unwrap();
        let jd = JobDir::new(d.path(), 7);
        assert_eq!(read_failed_note(&jd).unwrap().as_deref(), Some("second"));
        clear(d.path(), 7).unwrap();
        assert_eq!(read_failed_note(&jd).unwrap(), None);
        clear(d.path(), 7).unwrap();
    }
}
