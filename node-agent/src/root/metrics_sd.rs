//! The job's Prometheus file_sd file on this node, in the site's
//! `metrics_sd_dir` (`syndeo_protocol::metrics`): the prolog makes it, the
//! epilog removes it, whether or not the agent ever filled it.
//!
//! The directory is the admin's and root's (refused if a user could write
//! it): no user can create, rename or replace anything there, so every file
//! Prometheus reads there is a regular file root made, never a link, a FIFO
//! or a name a user chose. Root writes the file, with no target, under a
//! hidden random name Prometheus' glob does not match, gives it to the job's
//! user (mode 0644: Prometheus reads it), and renames it into place. The
//! agent, as the user, then rewrites its content in place.
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use syndeo_protocol::metrics::{encode, file_name, temp_name};

use super::dirs::{ensure_root_base, place_file, remove_in_root_base};

/// Makes job `job`'s file for `node` in `dir`, for its user `owner` (uid,
/// gid); a file left there for the same job id is replaced.
pub fn make(dir: &Path, job: u32, node: &str, owner: (u32, u32)) -> Result<()> {
    let name = file_name(job, node).map_err(|e| anyhow!(e))?;
    let shown = dir.join(&name);
    let base = ensure_root_base(dir, 0o755)?;
    // Whatever holds the name (a directory, say) goes; a file is replaced by the rename.
    remove_in_root_base(dir, &name)?;
    let random = crate::secret::random_token().context("random bytes")?;
    let temp = temp_name(&name, &random[..16]);
    let record = encode(None).map_err(|e| anyhow!(e))?;
    let result = place_file(&base, &temp, &name, owner, 0o644, &record);
    result.with_context(|| format!("making the job's metrics file {}", shown.display()))
}

/// Removes job `job`'s file for `node` from `dir`, if any. Nothing is
/// removed if `dir` is not root's (`make` never writes in such a directory).
pub fn remove(dir: &Path, job: u32, node: &str) -> Result<()> {
    let name = file_name(job, node).map_err(|e| anyhow!(e))?;
    match std::fs::symlink_metadata(dir.join(&name)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => remove_in_root_base(dir, &name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use syndeo_protocol::metrics::{decode, RECORD_SIZE};

    /// Root's directories are root's: as another user, `ensure_root_base` refuses them.
    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn the_file_is_made_empty_for_the_user_under_its_name_alone_and_removed() {
        if !root() {
            return;
        }
        let d = dir();
        let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        make(d.path(), 42, "node1", me).unwrap();
        let path = d.path().join("syndeo-42-node1.json");
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!((m.uid(), m.mode() & 0o7777, m.len()), (me.0, 0o644, RECORD_SIZE as u64));
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), None);
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a temporary name was left behind");
        remove(d.path(), 42, "node1").unwrap();
        assert!(!path.exists());
        remove(d.path(), 42, "node1").unwrap();
    }

    #[test]
    fn a_leftover_of_the_same_job_id_is_replaced_and_a_link_in_its_place_is_not_followed() {
        if !root() {
            return;
        }
        let d = dir();
        let victim = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(victim.path(), "keep").unwrap();
        let path = d.path().join("syndeo-7-n1.json");
        std::os::unix::fs::symlink(victim.path(), &path).unwrap();
        let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        make(d.path(), 7, "n1", me).unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        assert_eq!(std::fs::read_to_string(victim.path()).unwrap(), "keep");
        std::fs::create_dir(d.path().join("syndeo-8-n1.json")).unwrap();
        make(d.path(), 8, "n1", me).unwrap();
        assert!(d.path().join("syndeo-8-n1.json").is_file());
    }

    #[test]
    fn a_directory_others_can_write_or_a_strange_node_name_gets_no_file() {
        if !root() {
            return;
        }
        let d = dir();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        assert!(make(&open, 1, "n1", me).is_err());
        assert!(make(d.path(), 1, "../n1", me).is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "only `open`");
    }
}
