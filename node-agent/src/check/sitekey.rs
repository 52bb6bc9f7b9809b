//! The site key, as the prolog will want it (root's alone, long enough), and
//! its fingerprint: every node must hold the same key, so admins compare the
//! fingerprint across nodes (`pdsh -a syndeo-agent check | grep site-key`).
//! The fingerprint is HMAC-SHA256(key, a label of its own), never the key
//! nor any job's secret.
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Check, FileKind, NodeFacts};
use crate::root::sitekey::MIN_KEY_LEN;

const NAME: &str = "site-key";
const LABEL: &str = "syndeo site key fingerprint";

/// The key's fingerprint: 16 hex characters.
pub fn fingerprint(key: &[u8]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(LABEL.as_bytes());
    hex::encode(&m.finalize().into_bytes()[..8])
}

pub fn check(node: &dyn NodeFacts, path: &Path) -> Check {
    let p = path.display();
    let keygen = format!(
        "run `syndeo-agent keygen --path {p}` on one node and copy the key to every node (owner root, mode 0600)"
    );
    let meta = match node.lstat(path) {
        Ok(m) => m,
        Err(e) => return Check::fail(NAME, format!("{p}: {e}; every syndeo job fails on this node"), keygen),
    };
    if meta.kind != FileKind::File {
        return Check::fail(
            NAME,
            format!("{p} is not a regular file (a link or other); the prolog refuses it"),
            keygen,
        );
    }
    let key = node.read_secret(path).map(|k| k.trim_ascii().to_vec());
    let print = key.as_ref().map(|k| format!("fingerprint {}", fingerprint(k))).unwrap_or_default();
    if meta.uid != 0 || meta.mode & 0o077 != 0 {
        return Check::fail(
            NAME,
            format!(
                "{p} is owner {} mode {:04o} {print}: others could derive any job's secrets, and the prolog refuses it",
                meta.uid,
                meta.mode & 0o7777
            ),
            format!("chown root:root {p}; chmod 0600 {p}"),
        );
    }
    match key {
        Err(e) => Check::fail(NAME, format!("cannot read {p}: {e}"), keygen),
        Ok(k) if k.len() < MIN_KEY_LEN => Check::fail(
            NAME,
            format!("{p} has {} characters, fewer than {MIN_KEY_LEN}; the prolog refuses it", k.len()),
            keygen,
        ),
        Ok(_) => Check::ok(NAME, format!("{p} root's, mode {:04o}, {print} (the same on every node)", meta.mode)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::{FileInfo, Status};
    use super::*;

    const KEY: &str = "/etc/syndeo/site.key";

    #[test]
    fn a_root_only_key_is_ok_with_its_fingerprint() {
        let node = FakeNode::healthy();
        let c = check(&node, Path::new(KEY));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let key = "k".repeat(64);
        assert!(c.detail.contains(&fingerprint(key.as_bytes())), "{c:?}");
    }

    #[test]
    fn the_fingerprint_is_16_hex_characters_that_differ_between_keys_and_ignore_the_newline() {
        let a = fingerprint(b"a");
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, fingerprint(b"b"));
        let mut node = FakeNode::healthy();
        node.secrets.insert(KEY.into(), format!("{}\n", "k".repeat(64)).into_bytes());
        assert!(check(&node, Path::new(KEY)).detail.contains(&fingerprint("k".repeat(64).as_bytes())));
    }

    #[test]
    fn a_key_others_can_read_fails_with_chmod() {
        let mut node = FakeNode::healthy();
        node.set_stat(KEY, FileInfo::file(0, 0o644));
        let c = check(&node, Path::new(KEY));
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("0644") && c.fix.as_deref().unwrap().contains("chmod 0600"), "{}", c.detail);
    }

    #[test]
    fn a_key_of_another_owner_fails() {
        let mut node = FakeNode::healthy();
        node.set_stat(KEY, FileInfo::file(1000, 0o600));
        assert_eq!(check(&node, Path::new(KEY)).status, Status::Fail);
    }

    #[test]
    fn a_missing_short_or_linked_key_fails_with_keygen() {
        let mut node = FakeNode::healthy();
        node.secrets.insert(KEY.into(), b"short".to_vec());
        let c = check(&node, Path::new(KEY));
        assert!(c.status == Status::Fail && c.detail.contains("fewer than 32"), "{c:?}");
        node.set_stat(KEY, FileInfo { kind: FileKind::Symlink, ..FileInfo::file(0, 0o777) });
        assert_eq!(check(&node, Path::new(KEY)).status, Status::Fail);
        node.stats.remove(Path::new(KEY));
        let c = check(&node, Path::new(KEY));
        assert!(c.status == Status::Fail && c.fix.as_deref().unwrap().contains("keygen"));
    }
}
