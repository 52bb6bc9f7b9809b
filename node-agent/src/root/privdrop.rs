//! Drops root for the job user, for good: bounding set cleared (while still
//! allowed to), supplementary groups = the user's, then gid and uid (real,
//! effective, saved), no_new_privs, and every capability set emptied. The
//! result is checked; any failure is an error, never a half-dropped process.
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
    Ok(())
}
