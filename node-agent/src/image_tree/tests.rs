//! Unit tests of the image walk, on temporary trees.
use super::*;
use std::os::unix::fs::PermissionsExt;

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A small image: /usr/lib/python3/site, /etc, and /tmp and /var/tmp sticky.
fn image() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for dir in ["usr/lib/python3/site", "etc", "tmp", "var/tmp"] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    std::fs::write(d.path().join("usr/lib/python3/site/ray.py"), "").unwrap();
    for dir in ["tmp", "var/tmp"] {
        chmod(&d.path().join(dir), 0o1777);
    }
    d
}

#[test]
fn an_image_only_root_and_the_user_can_change_passes_with_its_sticky_tmp() {
    let d = image();
    // Inside a sticky directory anything goes: it is not entered.
    std::fs::create_dir(d.path().join("tmp/other")).unwrap();
    chmod(&d.path().join("tmp/other"), 0o777);
    check(d.path(), Path::new("/images/ray")).unwrap();
}

#[test]
fn a_directory_deep_inside_that_everyone_can_write_is_refused_and_named() {
    let d = image();
    chmod(&d.path().join("usr/lib/python3/site"), 0o777);
    let e = check(d.path(), Path::new("/images/ray")).unwrap_err();
    assert!(!e.is_node(), "{e}");
    let m = e.to_string();
    assert!(m.contains("image /images/ray: /usr/lib/python3/site is writable by every user (mode 777)"), "{m}");
}

#[test]
fn a_file_everyone_can_write_is_refused_and_named() {
    let d = image();
    chmod(&d.path().join("usr/lib/python3/site/ray.py"), 0o666);
    let m = check(d.path(), Path::new("/images/ray")).unwrap_err().to_string();
    assert!(m.contains("/usr/lib/python3/site/ray.py is writable by every user"), "{m}");
}

#[test]
fn a_directory_of_another_person_is_refused_and_named_and_a_system_accounts_passes() {
    if !root() {
        return; // chown is root's
    }
    let d = image();
    std::os::unix::fs::lchown(d.path().join("etc"), Some(4242), None).unwrap();
    let m = check(d.path(), Path::new("/images/ray")).unwrap_err().to_string();
    assert!(
        m.contains("/etc belongs to another user (uid 4242)") || m.contains("/etc belongs to another user ("),
        "{m}"
    );
}

#[test]
fn a_group_writable_directory_passes_for_roots_group_and_is_refused_for_a_group_of_others() {
    if !root() {
        return;
    }
    let d = image();
    let site = d.path().join("usr/lib/python3/site");
    chmod(&site, 0o775);
    check(d.path(), Path::new("/images/ray")).unwrap();
    // A group this node does not know: who is in it cannot be told.
    std::os::unix::fs::lchown(&site, None, Some(4242)).unwrap();
    let m = check(d.path(), Path::new("/images/ray")).unwrap_err().to_string();
    assert!(m.contains("/usr/lib/python3/site is writable by the group gid 4242"), "{m}");
}

#[test]
fn links_are_not_followed_out_of_the_image() {
    let d = image();
    let outside = tempfile::tempdir().unwrap();
    chmod(outside.path(), 0o777);
    std::os::unix::fs::symlink(outside.path(), d.path().join("usr/lib/python3/site/elsewhere")).unwrap();
    check(d.path(), Path::new("/images/ray")).unwrap();
}

#[test]
fn the_walk_stops_at_its_bound_and_lets_the_image_pass() {
    let d = image();
    for i in 0..20 {
        std::fs::write(d.path().join(format!("f{i}")), "").unwrap();
    }
    chmod(&d.path().join("usr/lib/python3/site"), 0o777);
    // The top's 24 entries come first; the bad directory lies below the bound.
    check_bounded(d.path(), Path::new("/images/ray"), 10).unwrap();
    assert!(check_bounded(d.path(), Path::new("/images/ray"), 1000).is_err());
}

#[test]
fn primary_groups_are_read_from_passwd() {
    let passwd = "root:x:0:0::/root:/bin/sh\nalice:x:1001:100::/home/alice:/bin/sh\nbob:x:1002:1002::/h:/bin/sh\n";
    assert_eq!(primary_uids_in(passwd, 100), [1001]);
    assert!(primary_uids_in(passwd, 50).is_empty());
}

/// Debian's own image dirs: /var/mail (root:mail 2775) and /var/local
/// (root:staff 2775); only system accounts are in those groups.
#[test]
fn debians_group_writable_var_mail_and_var_local_pass_when_no_person_is_in_their_groups() {
    if !root() {
        return;
    }
    let d = image();
    let mut walk = Walk { me: 1001, groups: HashMap::new() };
    for (dir, group) in [("var/mail", "mail"), ("var/local", "staff")] {
        let Ok(Some(g)) = nix::unistd::Group::from_name(group) else { continue };
        if !g.mem.is_empty() {
            continue; // this machine put people in it
        }
        let p = d.path().join(dir);
        std::fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::lchown(&p, Some(0), Some(g.gid.as_raw())).unwrap();
        chmod(&p, 0o2775);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(walk.changeable_by_others(&meta), None, "{dir}");
    }
}
