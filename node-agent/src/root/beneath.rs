//! Opening a path beneath a directory descriptor the way root's clean-up and
//! the log copy must walk a job's tree: relative to the descriptor, never
//! following a link in any component, never leaving the directory's
//! filesystem (a mount the user made inside their tree, a FUSE mount that
//! could hang the walker, is refused with `EXDEV` before it is entered), and
//! never above the directory. `openat2` (Linux 5.6) does all of it in the
//! kernel; on an older kernel each component is opened with `O_NOFOLLOW`
//! and its device compared with the directory's.
use std::ffi::OsStr;
use std::os::fd::RawFd;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, FileStat, Mode};
use nix::unistd::close;

/// An open descriptor, closed when dropped.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    pub fn raw(&self) -> RawFd {
        self.0
    }

    pub fn stat(&self) -> nix::Result<FileStat> {
        fstat(self.0)
    }

    /// Gives up ownership (the caller closes it).
    pub fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        let _ = close(self.0);
    }
}

/// Opens `rel` (relative, no `..`) beneath the directory `dir`, with `flags`
/// (`O_NOFOLLOW` and `O_CLOEXEC` are added). A link in any component is
/// `ELOOP`, a mount point is `EXDEV`, an absolute or `..` path is `EINVAL`.
pub fn open_beneath(dir: RawFd, rel: &Path, flags: OFlag) -> nix::Result<Fd> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_XDEV;
    match openat2(dir, rel, OpenHow::new().flags(flags).resolve(resolve)) {
        Err(Errno::ENOSYS) => walk(dir, rel, flags),
        other => other.map(Fd),
    }
}

/// The older kernels' way: one component at a time, each without following
/// links, each on the directory's device.
fn walk(dir: RawFd, rel: &Path, flags: OFlag) -> nix::Result<Fd> {
    let dev = fstat(dir)?.st_dev;
    let names: Vec<&OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Errno::EINVAL),
        })
        .collect::<nix::Result<_>>()?;
    let Some((last, dirs)) = names.split_last() else { return Err(Errno::EINVAL) };
    let mut at: Option<Fd> = None;
    for name in dirs {
        let parent = at.as_ref().map_or(dir, Fd::raw);
        let dflags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let next = Fd(openat(Some(parent), *name, dflags, Mode::empty())?);
        same_dev(&next, dev)?;
        at = Some(next);
    }
    let parent = at.as_ref().map_or(dir, Fd::raw);
    let fd = Fd(openat(Some(parent), *last, flags, Mode::empty())?);
    same_dev(&fd, dev)?;
    Ok(fd)
}

fn same_dev(fd: &Fd, dev: u64) -> nix::Result<()> {
    if fd.stat()?.st_dev == dev {
        Ok(())
    } else {
        Err(Errno::EXDEV)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn dir(p: &Path) -> std::fs::File {
        std::fs::File::open(p).unwrap()
    }

    #[test]
    fn a_link_in_any_component_is_refused_and_a_plain_path_opens() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("a"), d.path().join("l")).unwrap();
        std::os::unix::fs::symlink(d.path().join("a/b/f"), d.path().join("a/fl")).unwrap();
        let top = dir(d.path());
        assert!(open_beneath(top.as_raw_fd(), Path::new("a/b/f"), OFlag::O_RDONLY).is_ok());
        assert_eq!(open_beneath(top.as_raw_fd(), Path::new("l/b/f"), OFlag::O_RDONLY).unwrap_err(), Errno::ELOOP);
        assert_eq!(open_beneath(top.as_raw_fd(), Path::new("a/fl"), OFlag::O_RDONLY).unwrap_err(), Errno::ELOOP);
        assert!(open_beneath(top.as_raw_fd(), Path::new("../x"), OFlag::O_RDONLY).is_err());
        assert!(open_beneath(top.as_raw_fd(), Path::new("/etc/passwd"), OFlag::O_RDONLY).is_err());
        // The older kernels' walk says the same.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW;
        assert!(walk(top.as_raw_fd(), Path::new("a/b/f"), flags).is_ok());
        // (a link met as a directory is ENOTDIR there)
        assert!(matches!(walk(top.as_raw_fd(), Path::new("l/b/f"), flags), Err(Errno::ELOOP | Errno::ENOTDIR)));
        assert_eq!(walk(top.as_raw_fd(), Path::new("a/fl"), flags).unwrap_err(), Errno::ELOOP);
        assert_eq!(walk(top.as_raw_fd(), Path::new("../x"), flags).unwrap_err(), Errno::EINVAL);
    }

    /// A mount inside the tree (a tmpfs here, as root; a user's FUSE mount
    /// on a node) is not entered.
    #[test]
    fn a_mount_point_inside_the_tree_is_refused_not_entered() {
        if !nix::unistd::geteuid().is_root() {
            return; // mounting is root's
        }
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("m");
        std::fs::create_dir(&m).unwrap();
        nix::mount::mount(Some("t"), &m, Some("tmpfs"), nix::mount::MsFlags::empty(), None::<&str>).unwrap();
        std::fs::write(m.join("f"), b"x").unwrap();
        let top = dir(d.path());
        let got = open_beneath(top.as_raw_fd(), Path::new("m/f"), OFlag::O_RDONLY).map(|_| ());
        let walked = walk(top.as_raw_fd(), Path::new("m/f"), OFlag::O_RDONLY).map(|_| ());
        nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).unwrap();
        assert_eq!(got, Err(Errno::EXDEV));
        assert_eq!(walked, Err(Errno::EXDEV));
    }
}
