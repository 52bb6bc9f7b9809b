//! Drops root for the job user, for good: bounding set cleared (while still
//! allowed to), supplementary groups = the user's, then gid and uid (real,
//! effective, saved), not dumpable, no_new_privs, and every capability set
//! emptied. The result is checked; any failure is an error, never a
//! half-dropped process.
//!
//! Not dumpable: a process of the user's could otherwise ptrace this one, or
//! take its descriptors with `pidfd_getfd` (the mesh's privileged listening
//! socket root bound, the job's state), or read its memory. The kernel
//! resets the flag on every change of uid or gid (to `fs.suid_dumpable`) and
//! on exec, so it is set again right after the drop, and by every
//! `syndeo-agent` first thing in `main` ([`not_dumpable`]).
use anyhow::{bail, Context, Result};
use caps::CapSet;
use nix::unistd::{getgrouplist, getresgid, getresuid, setgroups, setresgid, setresuid, Gid, Uid, User};

pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub groups: Vec<Gid>,
}

impl Identity {
    /// The job user's identity from the user database.
    pub fn lookup(uid: u32, gid: u32) -> Result<Identity> {
        let user = User::from_uid(Uid::from_raw(uid))?
            .with_context(|| format!("uid {uid} has no passwd entry on this node"))?;
        let cname = std::ffi::CString::new(user.name.clone())?;
        let groups = getgrouplist(&cname, Gid::from_raw(gid)).context("getgrouplist")?;
        Ok(Identity { uid, gid, name: user.name, groups })
    }
}

pub fn drop_to(id: &Identity) -> Result<()> {
    if id.uid == 0 {
        bail!("refusing to run a syndeo job's processes as root");
    }
    caps::clear(None, CapSet::Bounding).context("clearing the capability bounding set")?;
    setgroups(&id.groups).context("setgroups")?;
    let (g, u) = (Gid::from_raw(id.gid), Uid::from_raw(id.uid));
    setresgid(g, g, g).context("setresgid")?;
    setresuid(u, u, u).context("setresuid")?;
    not_dumpable()?;
    nix::sys::prctl::set_no_new_privs().context("PR_SET_NO_NEW_PRIVS")?;
    for set in [CapSet::Ambient, CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).with_context(|| format!("clearing {set:?} capabilities"))?;
    }
    verify(id)
}

fn verify(id: &Identity) -> Result<()> {
    let r = getresuid()?;
    let g = getresgid()?;
    if [r.real, r.effective, r.saved].iter().any(|u| u.as_raw() != id.uid)
        || [g.real, g.effective, g.saved].iter().any(|x| x.as_raw() != id.gid)
    {
        bail!("privilege drop did not take: uid {r:?} gid {g:?}");
    }
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Bounding] {
        if !caps::read(None, set)?.is_empty() {
            bail!("capabilities left in {set:?} after the drop");
        }
    }
    if !nix::sys::prctl::get_no_new_privs()? {
        bail!("no_new_privs is not set");
    }
    if nix::sys::prctl::get_dumpable()? {
        bail!("the process is still dumpable after the drop");
    }
    Ok(())
}

/// `prctl(PR_SET_DUMPABLE, 0)`: no process of the user's may ptrace this
/// one, take its descriptors or read its memory; its /proc files become
/// root's.
pub fn not_dumpable() -> Result<()> {
    nix::sys::prctl::set_dumpable(false).context("PR_SET_DUMPABLE")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The flag is the process's: set back at the end, for the other tests.
    #[test]
    fn after_not_dumpable_the_kernel_reads_the_process_as_not_dumpable() {
        not_dumpable().unwrap();
        let dumpable = nix::sys::prctl::get_dumpable().unwrap();
        let owner = std::fs::metadata("/proc/self/status").unwrap().uid();
        let (status, fd) = (std::fs::read_to_string("/proc/self/status"), std::fs::File::open("/proc/self/fd/0"));
        nix::sys::prctl::set_dumpable(true).unwrap();
        assert!(!dumpable, "PR_GET_DUMPABLE still reads 1");
        assert_eq!(owner, 0, "/proc/self is not root's: the kernel does not treat the process as not dumpable");
        // The process itself still reads its own /proc (the agent reads its state through /proc/self/fd).
        assert!(status.is_ok() && fd.is_ok());
    }
}
