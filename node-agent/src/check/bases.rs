//! `temp_base` and `shm_base`, the root-owned parents of each job's temp dir
//! and /dev/shm: a directory of root's that only root can change, or, when
//! missing, one the prolog can create safely. In a sticky world-writable
//! parent (/tmp) a user's squatted entry is replaced by the prolog
//! (`root::dirs::ensure_root_base`), so there it is a warning; elsewhere the
//! prolog refuses it and the admin must fix it.
use std::io::ErrorKind;
use std::path::Path;

use super::{Check, FileInfo, FileKind, NodeFacts};

fn describe(m: &FileInfo) -> String {
    let kind = match m.kind {
        FileKind::Dir => "a directory",
        FileKind::Symlink => "a symbolic link",
        FileKind::File => "a file",
        _ => "a special file",
    };
    format!("{kind} of owner {} mode {:04o}", m.uid, m.mode)
}

/// A sticky directory anyone may write, such as /tmp.
fn shared_tmp(m: &FileInfo) -> bool {
    m.kind == FileKind::Dir && m.mode & 0o1002 == 0o1002
}

pub fn check(node: &dyn NodeFacts, name: &'static str, base: &Path) -> Check {
    let b = base.display();
    let create = format!("install -d -o root -g root -m 0755 {b}");
    match node.lstat(base) {
        Ok(m) if m.kind == FileKind::Dir && m.roots_alone() => {
            Check::ok(name, format!("{b} root's, mode {:04o}", m.mode))
        }
        Ok(m) => {
            let parent_shared = base.parent().and_then(|p| node.lstat(p).ok()).is_some_and(|p| shared_tmp(&p));
            if parent_shared {
                let detail = format!(
                    "{b} is {}: someone put it there; the prolog moves it aside and puts a root-owned one in its place",
                    describe(&m)
                );
                Check::warn(name, detail, format!("look at who made it, then remove it and run: {create}"))
            } else {
                let detail = format!("{b} is {}: the prolog refuses it, and syndeo jobs fail here", describe(&m));
                Check::fail(name, detail, format!("make it a directory only root can change: {create}"))
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => missing(node, name, base, &create),
        Err(e) => Check::fail(name, format!("cannot look at {b}: {e}"), create),
    }
}

/// A base that does not exist yet: the prolog makes it at the first job,
/// safely if its nearest existing ancestor is its parent in /tmp, or a
/// directory only root can change.
fn missing(node: &dyn NodeFacts, name: &'static str, base: &Path, create: &str) -> Check {
    let b = base.display();
    let Some((ancestor, meta)) = base.ancestors().skip(1).find_map(|a| node.lstat(a).ok().map(|m| (a, m))) else {
        return Check::fail(name, format!("{b} and every directory above it are missing"), create.to_string());
    };
    let a = ancestor.display();
    let parent = base.parent() == Some(ancestor);
    if meta.kind == FileKind::Dir && meta.roots_alone() {
        Check::ok(name, format!("{b} does not exist yet; the prolog creates it under {a} (root's) at the first job"))
    } else if parent && shared_tmp(&meta) {
        Check::ok(
            name,
            format!(
                "{b} does not exist yet; the prolog creates it in {a} at the first job, whatever a user puts there"
            ),
        )
    } else {
        let detail = format!("{b} does not exist, and {a} above it is {}: a user could make it first", describe(&meta));
        Check::warn(name, detail, format!("create it now: {create}"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::Status;
    use super::*;

    fn run(node: &FakeNode, base: &str) -> Check {
        check(node, "temp-base", Path::new(base))
    }

    #[test]
    fn a_root_only_directory_is_ok() {
        let c = run(&FakeNode::healthy(), "/run/syndeo-shm");
        assert!(c.status == Status::Ok && c.detail.contains("0755"), "{c:?}");
    }

    #[test]
    fn a_missing_base_in_tmp_or_under_roots_directory_is_ok() {
        let mut node = FakeNode::healthy();
        node.stats.remove(Path::new("/tmp/syndeo"));
        assert_eq!(run(&node, "/tmp/syndeo").status, Status::Ok);
        assert_eq!(run(&node, "/var/lib/syndeo/tmp").status, Status::Ok, "/var/lib is root's");
    }

    #[test]
    fn a_missing_base_two_levels_into_tmp_warns() {
        let node = FakeNode::healthy();
        let c = run(&node, "/tmp/site/syndeo");
        assert!(c.status == Status::Warn && c.fix.as_deref().unwrap().contains("install -d"), "{c:?}");
    }

    #[test]
    fn a_users_directory_in_tmp_warns_and_elsewhere_fails() {
        let mut node = FakeNode::healthy();
        node.set_stat("/tmp/syndeo", FileInfo::dir(1000, 0o777));
        let c = run(&node, "/tmp/syndeo");
        assert!(c.status == Status::Warn && c.detail.contains("owner 1000"), "{c:?}");
        node.set_stat("/run/syndeo-shm", FileInfo::dir(0, 0o777));
        let c = run(&node, "/run/syndeo-shm");
        assert!(c.status == Status::Fail && c.fix.as_deref().unwrap().contains("-m 0755"), "{c:?}");
    }

    #[test]
    fn a_link_in_place_of_the_base_is_not_ok() {
        let mut node = FakeNode::healthy();
        node.set_stat("/run/syndeo-shm", FileInfo { kind: FileKind::Symlink, ..FileInfo::dir(0, 0o777) });
        let c = run(&node, "/run/syndeo-shm");
        assert!(c.status == Status::Fail && c.detail.contains("symbolic link"), "{c:?}");
    }
}
