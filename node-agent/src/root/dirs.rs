//! Directory handling for root: a root-owned base (created if missing, and
//! refused if it is a symlink or writable by others), and per-job directories
//! made inside it with `mkdirat`/`fchownat` relative to the opened base, so no
//! path a user controls is ever followed.
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::fcntl::{AtFlags, OFlag};
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
/// have created `base` first (a link, a file, their own directory). Such an
/// entry is renamed aside (`<base>.untrusted-<pid>`), never followed, and a
/// fresh directory made: a user cannot make the prolog fail and so drain the
/// node. Anywhere else a wrong entry is the admin's to fix: an error.
pub fn ensure_root_base(base: &Path, mode: u32) -> Result<File> {
    for _ in 0..3 {
        match open_dir_nofollow(base) {
            Ok(dir) => {
                let meta = dir.metadata()?;
                if meta.uid() == 0 && meta.mode() & 0o022 == 0 {
                    return Ok(dir);
                }
                let why = format!("owner {}, mode {:o}", meta.uid(), meta.mode() & 0o7777);
                move_aside_or_fail(base, &why)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = base.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                }
                match std::fs::DirBuilder::new().mode(mode).create(base) {
                    Ok(()) => std::fs::set_permissions(base, std::fs::Permissions::from_mode(mode))?,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {} // raced: look again
                    Err(e) => return Err(e).with_context(|| format!("creating {}", base.display())),
                }
            }
            // A link (ELOOP) or a non-directory (ENOTDIR) in its place.
            Err(e) => move_aside_or_fail(base, &e.to_string())?,
        }
    }
    bail!("{} keeps being replaced while syndeo creates it; check who writes there", base.display())
}

fn move_aside_or_fail(base: &Path, why: &str) -> Result<()> {
    let parent = base.parent().unwrap_or(Path::new("/"));
    let pmeta = std::fs::symlink_metadata(parent).with_context(|| format!("stat {}", parent.display()))?;
    let shared_tmp = pmeta.is_dir() && pmeta.mode() & 0o1002 == 0o1002;
    if !shared_tmp {
        bail!("{} must be a directory owned by root and not writable by group or others ({why})", base.display());
    }
    let aside = base.with_file_name(format!(
        "{}.untrusted-{}",
        base.file_name().and_then(|n| n.to_str()).unwrap_or("syndeo"),
        std::process::id()
    ));
    eprintln!("warning: {} was not root's ({why}); moved it to {}", base.display(), aside.display());
    std::fs::rename(base, &aside).with_context(|| format!("moving {} aside", base.display()))
}

/// Creates `name` in the opened root-owned `parent`, mode 0700, owned by
/// uid:gid. A leftover entry of that name (an earlier run of the same job id)
/// is removed first, without following links.
pub fn make_job_dir(parent: &File, parent_path: &Path, name: &str, uid: u32, gid: u32) -> Result<()> {
    let path = parent_path.join(name);
    if std::fs::symlink_metadata(&path).is_ok() {
        remove_entry(&path)?;
    }
    mkdirat(Some(parent.as_raw_fd()), name, Mode::from_bits_truncate(0o700))
        .with_context(|| format!("mkdir {}", path.display()))?;
    chown_in(parent, name, uid, gid).with_context(|| format!("chown {}", path.display()))
}

/// Creates `name` in the opened root-owned `parent` as root's, so the user
/// has no window to plant links where root writes; writes `files` into it
/// (0600, never following a link, each then given to uid:gid) and hands the
/// directory itself to uid:gid last.
pub fn make_filled_job_dir(
    parent: &File,
    parent_path: &Path,
    name: &str,
    files: &[(&str, String)],
    uid: u32,
    gid: u32,
) -> Result<()> {
    make_job_dir(parent, parent_path, name, 0, 0)?;
    let dir = open_dir_nofollow(&parent_path.join(name))?;
    for (file, content) in files {
        let path = PathBuf::from(format!("/proc/self/fd/{}/{file}", dir.as_raw_fd()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .with_context(|| format!("writing {file} in {}", parent_path.join(name).display()))?;
        f.write_all(content.as_bytes())?;
        chown_in(&dir, file, uid, gid)?;
    }
    chown_in(parent, name, uid, gid)
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
    remove_entry(&PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd())))
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
    fn a_filled_job_dir_has_private_files_and_a_planted_link_is_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let parent = open_dir_nofollow(d.path()).unwrap();
        // A link where the job dir goes is removed first, never followed.
        let victim = d.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("42")).unwrap();
        let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        make_filled_job_dir(&parent, d.path(), "42", &[("secret", "s3cret".into())], me.0, me.1).unwrap();
        let secret = d.path().join("42/secret");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "s3cret");
        assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(d.path().join("42")).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(std::fs::read_dir(&victim).unwrap().next().is_none(), "wrote through the link");
    }

    #[test]
    fn open_dir_nofollow_refuses_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("l")).unwrap();
        assert!(open_dir_nofollow(&d.path().join("l")).is_err());
        assert!(open_dir_nofollow(d.path()).is_ok());
    }
}
