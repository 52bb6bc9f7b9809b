//! Removing a job's tree as root, whatever the job put in it: any depth, any
//! number of entries, without recursion on the stack and with two open
//! descriptors at most. The tree is flattened: every directory met is
//! emptied of its files, and its subdirectories are moved up to the top of
//! the tree (`renameat` within the tree, under fresh names), so no directory
//! is ever entered deeper than one level below the top. Nothing is reached
//! through a path: every step goes through a descriptor opened with
//! `O_NOFOLLOW`, never through `..`, so a link, or a directory moved
//! elsewhere meanwhile by another process of the user, can only lead root
//! to what the user could remove themselves. A mount the user made inside
//! the tree (a FUSE mount that could hang root) is detached, never entered
//! (`beneath.rs`). Every step checks the deadline. The names directories are
//! moved up under carry a random tag drawn per removal, so the user cannot
//! have made them first (and a name taken anyway is skipped, not a failure).
use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{renameat, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{close, unlinkat, UnlinkatFlags};

use super::beneath::open_beneath;
use super::mounts::detach_at;

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
                return left.failures.push((top_path.join(&name), OUT_OF_TIME.into()));
            }
            if !is_dir {
                unlink(top.as_raw_fd(), &name, false, &top_path.join(&name), left, &mut pass);
                continue;
            }
            let Ok(sub) = open_dir(top.as_raw_fd(), &name) else {
                unlink(top.as_raw_fd(), &name, false, &top_path.join(&name), left, &mut pass);
                continue;
            };
            let to = Hoist { top, deadline };
            to.hoist(&sub, &top_path.join(&name), &mut fresh, left, &mut pass);
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

/// Where `hoist` moves subdirectories to, and until when it may.
struct Hoist<'a> {
    top: &'a DirFd,
    deadline: Instant,
}

impl Hoist<'_> {
    /// Unlinks `sub`'s files and moves its subdirectories up into the top, a
    /// slice of entries at a time, until it is empty, a slice changes
    /// nothing, or the deadline passes.
    fn hoist(&self, sub: &DirFd, sub_path: &Path, fresh: &mut Fresh, left: &mut Leftovers, pass: &mut Failures) {
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
                if Instant::now() > self.deadline {
                    return pass.push((sub_path.join(&name), OUT_OF_TIME.into()));
                }
                if !is_dir {
                    unlink(sub.as_raw_fd(), &name, false, &sub_path.join(&name), left, pass);
                    continue;
                }
                match self.move_up(sub, &name, fresh) {
                    Ok(()) => moved += 1,
                    Err(e) => pass.push((sub_path.join(&name), format!("moving up: {e}"))),
                }
            }
            if left.removed == removed && moved == 0 || pass.len() > failed {
                return;
            }
        }
    }

    /// Moves the directory `name` of `sub` to a fresh name in the top.
    fn move_up(&self, sub: &DirFd, name: &OsStr, fresh: &mut Fresh) -> nix::Result<()> {
        loop {
            let to = fresh.next();
            match renameat(Some(sub.as_raw_fd()), name, Some(self.top.as_raw_fd()), to.as_os_str()) {
                // The name is taken (by something the user made): the next one.
                Err(Errno::EEXIST | Errno::ENOTEMPTY | Errno::ENOTDIR | Errno::EISDIR)
                    if Instant::now() <= self.deadline =>
                {
                    continue
                }
                // A mount point (the user's mount): detached, never entered.
                Err(Errno::EBUSY) if Instant::now() <= self.deadline => detach_at(sub.as_raw_fd(), name)?,
                other => return other,
            }
        }
    }
}

const OUT_OF_TIME: &str = "not removed before the epilog's time ran out";

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

/// Opens the directory `name` of `parent`: never through a link, and never
/// into another mount; a mount there (the user's) is detached first.
fn open_dir(parent: RawFd, name: &OsStr) -> nix::Result<DirFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    for _ in 0..16 {
        match open_beneath(parent, Path::new(name), flags) {
            Err(Errno::EXDEV) => detach_at(parent, name)?,
            other => return other.map(|fd| DirFd(fd.into_raw())),
        }
    }
    Err(Errno::EXDEV)
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
            let fd =
                nix::fcntl::openat(Some(dir.as_raw_fd()), "d", OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
                    .unwrap();
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

    /// A mount the user made inside their tree (a FUSE mount of theirs
    /// could hang root) is detached: root never enters it, the tree goes.
    #[test]
    fn a_mount_inside_the_tree_is_detached_not_entered_and_the_tree_goes() {
        if !nix::unistd::geteuid().is_root() {
            return; // mounting is root's
        }
        let base = tempfile::tempdir().unwrap();
        let m = base.path().join("job/a/m");
        std::fs::create_dir_all(&m).unwrap();
        nix::mount::mount(Some("t"), &m, Some("tmpfs"), nix::mount::MsFlags::empty(), None::<&str>).unwrap();
        std::fs::write(m.join("inside"), b"x").unwrap();
        let held = std::fs::File::open(&m).unwrap();
        let left = remove(base.path(), "job");
        let still = std::fs::metadata(format!("/proc/self/fd/{}/inside", held.as_raw_fd())).is_ok();
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        assert!(left.is_clean(), "{:?}", left.failures);
        assert!(!base.path().join("job").exists());
        assert!(still, "root entered the mount and removed what is inside");
    }

    #[test]
    fn a_removal_past_its_deadline_stops_and_names_what_is_left() {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(base.path().join("job/a/b")).unwrap();
        std::fs::write(base.path().join("job/a/f"), b"").unwrap();
        let dir = std::fs::File::open(base.path()).unwrap();
        let past = Instant::now() - Duration::from_secs(1);
        let left = remove_tree_at(dir.as_raw_fd(), OsStr::new("job"), base.path(), past);
        assert!(!left.is_clean());
        assert!(left.failures.iter().any(|(_, why)| why.contains("time ran out")), "{:?}", left.failures);
        let open = |p: &Path| DirFd(nix::fcntl::open(p, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap());
        let sub = base.path().join("job/a");
        let top = open(&base.path().join("job"));
        let (mut l, mut pass) = (Leftovers::default(), Vec::new());
        Hoist { top: &top, deadline: past }.hoist(&open(&sub), &sub, &mut Fresh::new(), &mut l, &mut pass);
        assert!(pass.iter().any(|(_, why)| why.contains("time ran out")), "hoist ignored its deadline: {pass:?}");
        assert!(sub.join("b").exists() && sub.join("f").exists());
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
