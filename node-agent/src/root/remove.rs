//! Removing a job's tree as root, whatever the job put in it: any depth, any
//! number of entries, without recursion on the stack and with two open
//! descriptors at most. The tree is flattened: every directory met is
//! emptied of its files, and its subdirectories are moved up to the top of
//! the tree (`renameat` within the tree, under fresh names), so no directory
//! is ever entered deeper than one level below the top. Nothing is reached
//! through a path: every step goes through a descriptor opened with
//! `O_NOFOLLOW`, never through `..`, so a link, or a directory moved
//! elsewhere meanwhile by another process of the user, can only lead root
//! to what the user could remove themselves. The names directories are
//! moved up under carry a random tag drawn per removal, so the user cannot
//! have made them first (and a name taken anyway is skipped, not a failure).
use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{close, unlinkat, UnlinkatFlags};

/// A directory descriptor, closed when dropped.
struct DirFd(RawFd);

impl DirFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for DirFd {
    fn drop(&mut self) {
        let _ = close(self.0);
    }
}

/// What could not be removed, and why; empty when all went.
#[derive(Debug, Default)]
pub struct Leftovers {
    pub failures: Vec<(PathBuf, String)>,
    /// Entries removed (files and directories).
    pub removed: u64,
}

impl Leftovers {
    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Removes the entry `name` of the directory `parent` (opened; shown as
/// `shown` in messages), and everything under it, until `deadline`.
pub fn remove_tree_at(parent: RawFd, name: &OsStr, shown: &Path, deadline: Instant) -> Leftovers {
    let mut left = Leftovers::default();
    let top_path = shown.join(name);
    let top = match open_dir(parent, name) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return left,
        Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => {
            let mut failed = Vec::new();
            unlink(parent, name, false, &top_path, &mut left, &mut failed);
            left.failures.extend(failed);
            return left;
        }
        Err(e) => {
            left.failures.push((top_path, e.to_string()));
            return left;
        }
    };
    flatten(&top, &top_path, deadline, &mut left);
    drop(top);
    if left.is_clean() {
        let mut failed = Vec::new();
        unlink(parent, name, true, &top_path, &mut left, &mut failed);
        left.failures.extend(failed);
    }
    left
}

/// Empties the directory `top`: files are unlinked, subdirectories emptied
/// one level down with theirs moved up here, then removed; pass after pass
/// until nothing is left, a pass removes nothing, or the deadline passes.
/// What fails in a pass is tried again in the next (a directory still full
/// after one slice of its entries is no failure); only what the last pass
/// could not remove is reported.
fn flatten(top: &DirFd, top_path: &Path, deadline: Instant, left: &mut Leftovers) {
    let mut fresh = Fresh::new();
    loop {
        let entries = match list(top.as_raw_fd()) {
            Ok(e) => e,
            Err(e) => return left.failures.push((top_path.to_path_buf(), format!("listing: {e}"))),
        };
        if entries.is_empty() {
            return;
        }
        let before = left.removed;
        let mut pass = Vec::new();
        for (name, is_dir) in entries {
            if Instant::now() > deadline {
                left.failures.extend(pass);
                return left
                    .failures
                    .push((top_path.join(&name), "not removed before the epilog's time ran out".into()));
            }
            if !is_dir {
                unlink(top.as_raw_fd(), &name, false, &top_path.join(&name), left, &mut pass);
                continue;
            }
            let Ok(sub) = open_dir(top.as_raw_fd(), &name) else {
                unlink(top.as_raw_fd(), &name, false, &top_path.join(&name), left, &mut pass);
                continue;
            };
            hoist(&sub, top, &top_path.join(&name), &mut fresh, left, &mut pass);
            drop(sub);
            unlink(top.as_raw_fd(), &name, true, &top_path.join(&name), left, &mut pass);
        }
        if left.removed == before {
            // A pass that removed nothing: what is left cannot go.
            left.failures.extend(pass);
            return;
        }
    }
}

/// Unlinks `sub`'s files and moves its subdirectories up into `top`, a
/// slice of entries at a time, until it is empty or a slice changes nothing.
fn hoist(sub: &DirFd, top: &DirFd, sub_path: &Path, fresh: &mut Fresh, left: &mut Leftovers, pass: &mut Failures) {
    loop {
        let entries = match list(sub.as_raw_fd()) {
            Ok(e) => e,
            Err(e) => return pass.push((sub_path.to_path_buf(), format!("listing: {e}"))),
        };
        if entries.is_empty() {
            return;
        }
        let (removed, failed) = (left.removed, pass.len());
        let mut moved = 0u64;
        for (name, is_dir) in entries {
            if !is_dir {
                unlink(sub.as_raw_fd(), &name, false, &sub_path.join(&name), left, pass);
                continue;
            }
            loop {
                let to = fresh.next();
                match renameat(Some(sub.as_raw_fd()), name.as_os_str(), Some(top.as_raw_fd()), to.as_os_str()) {
                    // The name is taken (by something the user made): the next one.
                    Err(Errno::EEXIST | Errno::ENOTEMPTY | Errno::ENOTDIR | Errno::EISDIR) => continue,
                    Err(e) => pass.push((sub_path.join(&name), format!("moving up: {e}"))),
                    Ok(()) => moved += 1,
                }
                break;
            }
        }
        if left.removed == removed && moved == 0 || pass.len() > failed {
            return;
        }
    }
}

type Failures = Vec<(PathBuf, String)>;

/// Fresh names in the top of the tree: `.syndeo-rm-<random tag>-<n>`.
struct Fresh {
    tag: String,
    n: u64,
}

impl Fresh {
    fn new() -> Fresh {
        let tag = crate::secret::random_token().map(|t| t[..16].to_string());
        Fresh { tag: tag.unwrap_or_else(|_| format!("{}", std::process::id())), n: 0 }
    }

    fn next(&mut self) -> OsString {
        self.n += 1;
        OsString::from(format!(".syndeo-rm-{}-{}", self.tag, self.n))
    }
}

/// The entries of a directory (without `.` and `..`), and whether each is a
/// directory (not following links).
fn list(dir: RawFd) -> nix::Result<Vec<(OsString, bool)>> {
    let mut d = Dir::openat(Some(dir), ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW, Mode::empty())?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e?;
        let name = OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let is_dir = match e.file_type() {
            Some(Type::Directory) => true,
            Some(_) => false,
            None => fstatat(Some(dir), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
                .unwrap_or(false),
        };
        out.push((name.to_os_string(), is_dir));
        // Read in slices: a directory of a million entries costs no more memory than this.
        if out.len() >= 65536 {
            break;
        }
    }
    Ok(out)
}

fn open_dir(parent: RawFd, name: &OsStr) -> nix::Result<DirFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(Some(parent), name, flags, Mode::empty()).map(DirFd)
}

/// Unlinks one entry; a failure goes to `failed`.
fn unlink(dir: RawFd, name: &OsStr, is_dir: bool, shown: &Path, left: &mut Leftovers, failed: &mut Failures) {
    let flag = if is_dir { UnlinkatFlags::RemoveDir } else { UnlinkatFlags::NoRemoveDir };
    match unlinkat(Some(dir), name, flag) {
        Ok(()) => left.removed += 1,
        Err(Errno::ENOENT) => {}
        Err(Errno::EISDIR) if !is_dir => unlink(dir, name, true, shown, left, failed),
        Err(e) => failed.push((shown.to_path_buf(), e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use super::*;

    fn remove(base: &Path, name: &str) -> Leftovers {
        let dir = std::fs::File::open(base).unwrap();
        remove_tree_at(dir.as_raw_fd(), OsStr::new(name), base, Instant::now() + Duration::from_secs(60))
    }

    /// Deeper than PATH_MAX allows to name, made with relative mkdirs.
    #[test]
    fn a_tree_thousands_of_levels_deep_goes_with_two_descriptors_and_no_recursion() {
        let base = tempfile::tempdir().unwrap();
        let mut dir = std::fs::File::open(base.path()).unwrap();
        nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), "job", Mode::S_IRWXU).unwrap();
        dir = std::fs::File::open(base.path().join("job")).unwrap();
        for _ in 0..5000 {
            nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), "d", Mode::S_IRWXU).unwrap();
            let fd = openat(Some(dir.as_raw_fd()), "d", OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
            std::fs::write(format!("/proc/self/fd/{fd}/f"), b"x").unwrap();
            dir = std::fs::File::open(format!("/proc/self/fd/{fd}")).unwrap();
            close(fd).unwrap();
        }
        let left = remove(base.path(), "job");
        assert!(left.is_clean(), "{:?}", &left.failures[..left.failures.len().min(3)]);
        assert_eq!(left.removed, 10001);
        assert!(!base.path().join("job").exists());
    }

    #[test]
    fn many_files_and_links_go_and_nothing_a_link_points_to_is_touched() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        let job = base.path().join("job");
        std::fs::create_dir_all(job.join("a/b")).unwrap();
        for i in 0..20000 {
            std::fs::write(job.join(format!("a/f{i}")), b"").unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), job.join("a/b/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("keep"), job.join("filelink")).unwrap();
        let left = remove(base.path(), "job");
        assert!(left.is_clean(), "{:?}", left.failures);
        assert!(!job.exists());
        assert_eq!(std::fs::read(outside.path().join("keep")).unwrap(), b"k");
    }

    /// More entries in one subdirectory than one listing slice holds: no
    /// failure is reported for the slices that came before the last.
    #[test]
    fn a_subdirectory_larger_than_a_listing_slice_goes_with_no_failure_reported() {
        let base = tempfile::tempdir().unwrap();
        let big = base.path().join("job/litter");
        std::fs::create_dir_all(&big).unwrap();
        for i in 0..(65536 * 2 + 10) {
            std::fs::File::create(big.join(format!("f{i}"))).unwrap();
        }
        let left = remove(base.path(), "job");
        assert!(left.is_clean(), "{} failures, first {:?}", left.failures.len(), left.failures.first());
        assert!(!base.path().join("job").exists());
    }

    /// The user made names the removal once used (`.syndeo-rm-N`), as
    /// files and links, in the top of their tree: they go like the rest.
    #[test]
    fn names_the_user_made_where_directories_are_moved_up_do_not_stop_the_removal() {
        let base = tempfile::tempdir().unwrap();
        let job = base.path().join("job");
        std::fs::create_dir_all(job.join("a/b/c")).unwrap();
        for n in 1..50 {
            std::fs::write(job.join(format!(".syndeo-rm-{n}")), b"").unwrap();
            std::os::unix::fs::symlink("/etc", job.join(format!(".syndeo-rm-x-{n}"))).unwrap();
        }
        let left = remove(base.path(), "job");
        assert!(left.is_clean(), "{:?}", left.failures);
        assert!(!job.exists());
    }

    #[test]
    fn a_top_entry_that_is_a_link_is_unlinked_not_followed() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        std::os::unix::fs::symlink(outside.path(), base.path().join("job")).unwrap();
        assert!(remove(base.path(), "job").is_clean());
        assert!(outside.path().join("keep").exists() && !base.path().join("job").exists());
    }
}
