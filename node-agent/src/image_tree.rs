//! Whether a directory image (an Apptainer sandbox, a bubblewrap root
//! filesystem) holds anything another user can change while the job runs
//! it: a directory or file owned by another person (not the job's user, not
//! root, not a system account below uid 1000), or writable by everyone, or by
//! a group with another person in it.
//! Such a user could put their code where the job's processes run it, as
//! the job's user. The top of the image is checked by `runtime::check_owner`;
//! this walks the rest, as the job's user, without following links.
//!
//! Sticky directories (/tmp, /var/tmp: anyone may add, nobody may change
//! another's entries) are allowed and not entered. The walk stops after
//! `MAX_ENTRIES` entries, and says so in the agent's log.
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fault::Fault;

/// Entries looked at, at most (an image of a large environment may hold
/// millions; the walk costs about a second per 200,000 on a local disk).
pub const MAX_ENTRIES: usize = 200_000;

/// The job's user, and what is known of the groups met.
struct Walk {
    me: u32,
    groups: HashMap<u32, bool>,
}

/// Refuses `root` (the image's resolved path, shown as `shown`) if some
/// directory or file in it can be changed by another user; the message
/// names it.
pub fn check(root: &Path, shown: &Path) -> Result<(), Fault> {
    check_bounded(root, shown, MAX_ENTRIES)
}

fn check_bounded(root: &Path, shown: &Path, max: usize) -> Result<(), Fault> {
    let mut walk = Walk { me: nix::unistd::getuid().as_raw(), groups: HashMap::new() };
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue }; // unreadable: the job cannot use it either
        for entry in entries.flatten() {
            seen += 1;
            if seen > max {
                tracing::warn!(
                    "image {}: checked only its first {max} entries for parts other users can change",
                    shown.display()
                );
                return Ok(());
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
            if let Some(why) = walk.changeable_by_others(&meta) {
                return Err(refusal(shown, &entry.path(), root, &why));
            }
            if meta.is_dir() && meta.mode() & 0o1000 == 0 {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

fn refusal(shown: &Path, path: &Path, root: &Path, why: &str) -> Fault {
    let inside = PathBuf::from("/").join(path.strip_prefix(root).unwrap_or(path));
    Fault::user(format!(
        "image {}: {} {why}: another user could change it while your job runs it ({}); give it to you or \
         root and remove the write permission of group and others (chmod go-w), or use another image",
        shown.display(),
        inside.display(),
        path.display()
    ))
}

impl Walk {
    /// Why a directory or regular file can be changed by another user, if it can.
    fn changeable_by_others(&mut self, meta: &std::fs::Metadata) -> Option<String> {
        if !meta.is_dir() && !meta.is_file() {
            return None; // links are not followed; devices and the like hold no code
        }
        let mode = meta.mode();
        if is_other_person(meta.uid(), self.me) {
            return Some(format!("belongs to another user ({})", user_name(meta.uid())));
        }
        let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
        if sticky_dir {
            return None;
        }
        if mode & 0o002 != 0 {
            return Some(format!("is writable by every user (mode {:o})", mode & 0o7777));
        }
        if mode & 0o020 != 0 && !self.group_is_private(meta.gid()) {
            return Some(format!(
                "is writable by the group {} (mode {:o}), which has other users in it",
                group_name(meta.gid()),
                mode & 0o7777
            ));
        }
        None
    }

    /// Whether no other user is in the group `gid`: no account but the job's
    /// user and system accounts (uid below `FIRST_USER_UID`: the mail
    /// daemon's, say, which run no jobs) among its listed members and the
    /// accounts of this node's /etc/passwd whose primary group it is. A
    /// group this node does not know is not private.
    fn group_is_private(&mut self, gid: u32) -> bool {
        if gid == 0 {
            return true;
        }
        if let Some(&known) = self.groups.get(&gid) {
            return known;
        }
        let me = self.me;
        let other = |uid: u32| is_other_person(uid, me);
        let private = match nix::unistd::Group::from_gid(gid.into()) {
            Ok(Some(g)) => {
                let member = |name: &String| nix::unistd::User::from_name(name).ok().flatten().map(|u| u.uid.as_raw());
                !g.mem.iter().any(|m| member(m).is_none_or(other)) && !primary_uids(gid).into_iter().any(other)
            }
            _ => false,
        };
        self.groups.insert(gid, private);
        private
    }
}

/// The first uid of a person's account (Debian's and Red Hat's UID_MIN).
const FIRST_USER_UID: u32 = 1000;

/// Whether `uid` is someone who could run jobs here, other than `me`: not
/// root, not a system account (the `man` or `mail` daemon's, which own
/// directories of stock images and run no jobs).
fn is_other_person(uid: u32, me: u32) -> bool {
    uid >= FIRST_USER_UID && uid != me
}

/// The uids of /etc/passwd's accounts whose primary group is `gid`.
fn primary_uids(gid: u32) -> Vec<u32> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    primary_uids_in(&text, gid)
}

fn primary_uids_in(passwd: &str, gid: u32) -> Vec<u32> {
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[3].parse() == Ok(gid)).then(|| f[2].parse().ok())?
        })
        .collect()
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(uid.into()).ok().flatten().map_or(format!("uid {uid}"), |u| u.name)
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(gid.into()).ok().flatten().map_or(format!("gid {gid}"), |g| g.name)
}

#[cfg(test)]
mod tests;
