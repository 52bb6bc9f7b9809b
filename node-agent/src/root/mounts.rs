//! Per-job tmpfs mounts, as root: the job's runtime directory (in /run) and
//! its shared-memory directory (the containers' /dev/shm) are each a fresh
//! tmpfs with a size cap, owned by the job user, mode 0700. A job can never
//! fill /run or /dev/shm through them, and with the cgroup plugins their
//! pages count against the job's own memory limit. The epilog unmounts them,
//! which frees whatever the job left there at once.
use std::path::Path;

use anyhow::{Context, Result};
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

/// Unmounts `target` if something is mounted there (lazily: a process still
/// inside it cannot keep it); a path that is not a mount point is fine.
pub fn unmount(target: &Path) -> Result<()> {
    match umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("unmounting {}", target.display())),
    }
}
