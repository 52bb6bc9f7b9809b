//! Directory handling for root: a root-owned base (created if missing, and
//! refused if it is a symlink or writable by others), and per-job directories
//! made inside it with `mkdirat`/`fchownat` relative to the opened base, so no
//! path a user controls is ever followed.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{fchownat, Gid, Uid};

/// Opens `path` as a directory without following a final symlink.
pub fn open_dir_nofollow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
        .open(path)
}

/// Ensures `base` is a root-owned directory not writable by group or others,
/// creating it (and its parents) with `mode` when missing.
pub fn ensure_root_base(base: &Path, mode: u32) -> Result<File> {
    if !base.exists() {
        std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
        std::fs::set_permissions(base, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    }
    let dir = open_dir_nofollow(base).with_context(|| format!("{} must be a directory, not a link", base.display()))?;
    let meta = dir.metadata()?;
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        bail!(
            "{} must be owned by root and not writable by group or others (owner {}, mode {:o})",
            base.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(dir)
}

/// Creates `name` in the opened root-owned `parent`, mode 0700, owned by
/// uid:gid. A leftover entry of that name (an earlier run of the same job id)
/// is removed first, without following links.
pub fn make_job_dir(parent: &File, parent_path: &Path, name: &str, uid: u32, gid: u32) -> Result<()> {
    let path = parent_path.join(name);
    if std::fs::symlink_metadata(&path).is_ok() {
        remove_entry(&path)?;
    }
    mkdirat(Some(parent.as_raw_fd()), name, Mode::from_bits_truncate(0o700)).with_context(|| format!("mkdir {}", path.display()))?;
    chown_in(parent, name, uid, gid).with_context(|| format!("chown {}", path.display()))
}

pub fn chown_in(parent: &File, name: &str, uid: u32, gid: u32) -> Result<()> {
    fchownat(
        Some(parent.as_raw_fd()),
        name,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )?;
    Ok(())
}

/// Removes a file, link or whole tree at `path` without following links
/// (`std::fs::remove_dir_all` does not follow them).
pub fn remove_entry(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("stat {}", path.display())),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).with_context(|| format!("removing {}", path.display())),
        Ok(_) => std::fs::remove_file(path).with_context(|| format!("removing {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_entry_does_not_follow_a_symlink_to_a_directory() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("keep"), b"x").unwrap();
        let job = d.path().join("job");
        std::fs::create_dir(&job).unwrap();
        std::os::unix::fs::symlink(&victim, job.join("link")).unwrap();
        remove_entry(&job).unwrap();
        assert!(!job.exists());
        assert!(victim.join("keep").exists(), "the link's target must survive");
    }

    #[test]
    fn open_dir_nofollow_refuses_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("l")).unwrap();
        assert!(open_dir_nofollow(&d.path().join("l")).is_err());
        assert!(open_dir_nofollow(d.path()).is_ok());
    }
}
