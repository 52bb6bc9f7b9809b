//! The site key, read by root at every syndeo job's start: every job's
//! secrets derive from it, so it must be root's alone and long enough. Any
//! doubt about it is a node fault with a message that says what to fix.
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use nix::fcntl::OFlag;

/// The shortest key accepted, in characters (`syndeo-agent keygen` writes 64).
pub const MIN_KEY_LEN: usize = 32;

/// The key's bytes (surrounding whitespace trimmed), or why it is unfit.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    let hint = "run `syndeo-agent keygen` on one node and copy the key to every node, owner root, mode 0600";
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)
        .with_context(|| format!("reading the site key {} ({hint})", path.display()))?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        bail!("the site key {} is not a regular file ({hint})", path.display());
    }
    if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        bail!(
            "the site key {} is owner {} mode {:o}; it must be owner root, mode 0600, or other users could derive \
             any job's secrets",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    let mut key = Vec::new();
    f.by_ref().take(64 * 1024).read_to_end(&mut key)?;
    let key = key.trim_ascii().to_vec();
    if key.len() < MIN_KEY_LEN {
        bail!(
            "the site key {} has {} characters; at least {MIN_KEY_LEN} are needed ({hint})",
            path.display(),
            key.len()
        );
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(content: &str, mode: u32) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("site.key");
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    #[test]
    fn a_root_only_key_of_64_characters_is_read() {
        if !nix::unistd::getuid().is_root() {
            return; // ownership is root's to test
        }
        let d = key_file(&format!("{}\n", "a".repeat(64)), 0o600);
        assert_eq!(read(&d.path().join("site.key")).unwrap(), "a".repeat(64).as_bytes());
    }

    #[test]
    fn a_key_others_can_read_a_short_key_or_a_link_is_refused_with_the_fix() {
        let d = key_file(&"a".repeat(64), 0o644);
        let e = read(&d.path().join("site.key")).unwrap_err().to_string();
        assert!(e.contains("mode 0600") || e.contains("owner root"), "{e}");
        let d = key_file("short", 0o600);
        let e = read(&d.path().join("site.key")).unwrap_err().to_string();
        assert!(e.contains("at least 32") || e.contains("owner root"), "{e}");
        std::os::unix::fs::symlink(d.path().join("site.key"), d.path().join("link")).unwrap();
        assert!(read(&d.path().join("link")).is_err());
    }
}
