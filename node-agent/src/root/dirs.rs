//! Directory handling for root: a root-owned base (created if missing, and
//! refused if it is a symlink or writable by others), and per-job directories
//! made inside it with `mkdirat`/`fchownat` relative to the opened base, so no
//! path a user controls is ever followed.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{renameat2, AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{fchownat, Gid, Uid};

/// Opens `path` as a directory without following a final symlink.
pub fn open_dir_nofollow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits()).open(path)
}

/// Ensures `base` is a root-owned directory not writable by group or others,
/// creating it (and its parents) with `mode` when missing.
///
/// In a sticky, world-writable parent such as /tmp or /dev/shm any user may
/// have created `base` first (a link, a file, their own directory), and may
/// keep re-creating it in a loop. syndeo never follows such an entry and
/// never loses the race: it makes a fresh root-owned directory under an
/// unpredictable name and atomically exchanges it with whatever holds
/// `base` (`renameat2(RENAME_EXCHANGE)`). Once in place, a root-owned entry
/// of a sticky directory cannot be moved or removed by a user, so one
/// exchange settles it; the user's entry is left under the aside name.
/// Anywhere else a wrong entry is the admin's to fix: an error.
pub fn ensure_root_base(base: &Path, mode: u32) -> Result<File> {
    for _ in 0..4 {
        match open_dir_nofollow(base) {
            Ok(dir) => {
                let meta = dir.metadata()?;
                if meta.uid() == 0 && meta.mode() & 0o022 == 0 {
                    return Ok(dir);
                }
                let why = format!("owner {}, mode {:o}", meta.uid(), meta.mode() & 0o7777);
                replace_squatted(base, mode, &why)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = base.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                }
                if shared_tmp(base)? {
                    // Made aside and moved in whole: never a moment as the user's.
                    replace_squatted(base, mode, "missing")?;
                    continue;
                }
                match std::fs::DirBuilder::new().mode(mode).create(base) {
                    Ok(()) => std::fs::set_permissions(base, std::fs::Permissions::from_mode(mode))?,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {} // raced: look again
                    Err(e) => return Err(e).with_context(|| format!("creating {}", base.display())),
                }
            }
            // A link (ELOOP) or a non-directory (ENOTDIR) in its place.
            Err(e) => replace_squatted(base, mode, &e.to_string())?,
        }
    }
    bail!("{} keeps changing while syndeo creates it; check who writes there", base.display())
}

/// Whether `path`'s parent is a sticky directory anyone may write (/tmp).
fn shared_tmp(path: &Path) -> Result<bool> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let meta = std::fs::symlink_metadata(parent).with_context(|| format!("stat {}", parent.display()))?;
    Ok(meta.is_dir() && meta.mode() & 0o1002 == 0o1002)
}

/// In a sticky shared directory: a fresh root-owned directory takes `base`'s
/// place atomically, and what was there goes to an unpredictable aside name.
/// Elsewhere: an error for the admin.
fn replace_squatted(base: &Path, mode: u32, why: &str) -> Result<()> {
    if !shared_tmp(base)? {
        bail!("{} must be a directory owned by root and not writable by group or others ({why})", base.display());
    }
    let fresh = aside_name(base, "new")?;
    std::fs::DirBuilder::new().mode(mode).create(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(mode))?;
    match renameat2(None, &fresh, None, base, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => {
            let old = aside_name(base, "untrusted")?;
            std::fs::rename(&fresh, &old).with_context(|| format!("moving {} aside", fresh.display()))?;
            eprintln!("warning: {} was not root's ({why}); moved it to {}", base.display(), old.display());
            Ok(())
        }
        Err(Errno::ENOENT) => {
            // Nothing to exchange with (it was missing, or removed meanwhile).
            match renameat2(None, &fresh, None, base, RenameFlags::RENAME_NOREPLACE) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let _ = std::fs::remove_dir(&fresh);
                    if e == Errno::EEXIST {
                        Ok(()) // raced: the caller looks again
                    } else {
                        Err(e).with_context(|| format!("moving {} into place", fresh.display()))
                    }
                }
            }
        }
        Err(e) => {
            let _ = std::fs::remove_dir(&fresh);
            Err(e).with_context(|| format!("exchanging {} for {}", fresh.display(), base.display()))
        }
    }
}

/// `<base>.<what>-<16 random hex digits>` beside `base`.
fn aside_name(base: &Path, what: &str) -> Result<PathBuf> {
    let random = crate::secret::random_token().context("random bytes")?;
    let name = base.file_name().and_then(|n| n.to_str()).unwrap_or("syndeo");
    Ok(base.with_file_name(format!("{name}.{what}-{}", &random[..16])))
}

/// Creates `name` in the opened root-owned `parent`, mode 0700, owned by
/// uid:gid. A leftover entry of that name (an earlier run of the same job id)
/// is removed first, without following links.
pub fn make_job_dir(parent: &File, parent_path: &Path, name: &str, uid: u32, gid: u32) -> Result<()> {
    let path = parent_path.join(name);
    remove_in(parent, parent_path, name)?;
    mkdirat(Some(parent.as_raw_fd()), name, Mode::from_bits_truncate(0o700))
        .with_context(|| format!("mkdir {}", path.display()))?;
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

/// Places a new file `name` in the opened root-owned `dir`: `content` is
/// written under `temp` (created new, never through a link), given to
/// `owner` (uid, gid) with `mode`, then renamed over `name`; `temp` is gone
/// whether or not this succeeds. No user can see a half-written file.
pub fn place_file(dir: &File, temp: &str, name: &str, owner: (u32, u32), mode: u32, content: &[u8]) -> Result<()> {
    let result = write_new(dir, temp, owner, mode, content).and_then(|()| {
        nix::fcntl::renameat(Some(dir.as_raw_fd()), temp, Some(dir.as_raw_fd()), name).context("moving it into place")
    });
    if result.is_err() {
        let _ = nix::unistd::unlinkat(Some(dir.as_raw_fd()), temp, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    result
}

/// Creates `name` (new, never through a link) in the opened `dir`, writes
/// `content`, and gives it to `owner` with `mode`.
fn write_new(dir: &File, name: &str, owner: (u32, u32), mode: u32, content: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd())))?;
    f.write_all(content)?;
    std::os::unix::fs::fchown(&f, Some(owner.0), Some(owner.1)).context("chown")?;
    f.set_permissions(std::fs::Permissions::from_mode(mode)).context("chmod")?;
    Ok(())
}

/// Removes `name` (a job's directory) from the root-owned directory `base`,
/// resolving `base` once, without following a link in its place: if `base`
/// is not root's, nothing of syndeo's is in it and nothing is removed.
pub fn remove_in_root_base(base: &Path, name: &str) -> Result<()> {
    let dir = match open_dir_nofollow(base) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => bail!("{} is not a directory of root's ({e}); removed nothing there", base.display()),
    };
    let meta = dir.metadata()?;
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        bail!("{} is not root's (owner {}); removed nothing there", base.display(), meta.uid());
    }
    remove_in(&dir, base, name)
}

/// Removes the entry `name` of the opened directory `parent`, whatever it
/// is, without following links (see `remove.rs`).
fn remove_in(parent: &File, parent_path: &Path, name: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let left = super::remove::remove_tree_at(parent.as_raw_fd(), std::ffi::OsStr::new(name), parent_path, deadline);
    match left.failures.first() {
        None => Ok(()),
        Some((p, why)) => bail!("cannot remove {}: {why}", p.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_that_is_not_roots_is_refused_outside_a_sticky_dir() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("syndeo");
        std::os::unix::fs::symlink("/etc", &base).unwrap();
        // tempdir is 0700, not sticky: the admin must fix it, nothing is moved.
        let e = ensure_root_base(&base, 0o755).unwrap_err().to_string();
        assert!(e.contains("must be a directory owned by root"), "{e}");
        assert!(std::fs::symlink_metadata(&base).unwrap().file_type().is_symlink());
    }

    #[test]
    fn removal_through_a_base_that_is_a_link_removes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::create_dir_all(victim.join("42")).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("base")).unwrap();
        assert!(remove_in_root_base(&d.path().join("base"), "42").is_err());
        assert!(victim.join("42").exists(), "followed the link");
        // Through a real base the job's entry goes.
        let base = d.path().join("real");
        std::fs::create_dir_all(base.join("42/sub")).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        remove_in_root_base(&base, "42").unwrap();
        assert!(!base.join("42").exists() && base.exists());
    }

    #[test]
    fn open_dir_nofollow_refuses_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("l")).unwrap();
        assert!(open_dir_nofollow(&d.path().join("l")).is_err());
        assert!(open_dir_nofollow(d.path()).is_ok());
    }
}
