//! Per-job tmpfs mounts, as root: the job's runtime directory (in /run) and
//! its shared-memory directory (the containers' /dev/shm) are each a fresh
//! tmpfs with a size cap, owned by the job user, mode 0700. A job can never
//! fill /run or /dev/shm through them, and with the cgroup plugins their
//! pages count against the job's own memory limit. The epilog unmounts them,
//! which frees whatever the job left there at once.
use std::ffi::OsStr;
use std::os::fd::RawFd;
use std::path::Path;

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Mounts a tmpfs of `size_mb` MiB at `target` (an empty directory root
/// made under a root-owned base), owned by uid:gid with mode 0700.
pub fn mount_tmpfs(target: &Path, size_mb: u64, uid: u32, gid: u32, exec: bool) -> Result<()> {
    let opts = format!("size={size_mb}m,mode=0700,uid={uid},gid={gid}");
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if !exec {
        flags |= MsFlags::MS_NOEXEC;
    }
    mount(Some("syndeo"), target, Some("tmpfs"), flags, Some(opts.as_str()))
        .with_context(|| format!("mounting a tmpfs ({opts}) on {}", target.display()))
}

/// Mounts stacked on one path that `unmount` takes off at most.
const MAX_STACKED: usize = 16;

/// Unmounts everything mounted at `target` (lazily: a process still inside
/// cannot keep it; a mount the user stacked on top, a FUSE mount of theirs,
/// goes too); a path that is not a mount point is fine.
pub fn unmount(target: &Path) -> Result<()> {
    for _ in 0..MAX_STACKED {
        match umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("unmounting {}", target.display())),
        }
    }
    bail!("{} has over {MAX_STACKED} mounts stacked on it", target.display())
}

/// Detaches what is mounted on the entry `name` of the opened directory
/// `dir` (a mount the user made inside their own tree), resolving nothing
/// but that one entry, and never following it if it is a link.
pub fn detach_at(dir: RawFd, name: &OsStr) -> nix::Result<()> {
    let mut path = std::ffi::OsString::from(format!("/proc/self/fd/{dir}/"));
    path.push(name);
    umount2(Path::new(&path), MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
}
