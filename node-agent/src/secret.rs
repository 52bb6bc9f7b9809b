//! Per-job secrets derived from the site key, so every node's prolog computes
//! the same values on its own without talking to the others:
//! job secret = HMAC-SHA256(site key, "syndeo job <id>"); from it the mesh's
//! bearer token and Ray's auth token. Without the root-only site key nobody
//! can compute another job's values.
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

fn hmac_hex(key: &[u8], msg: &str) -> String {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(msg.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

pub fn job_secret(site_key: &[u8], job_id: u32) -> String {
    hmac_hex(site_key, &format!("syndeo job {job_id}"))
}

/// Bearer token on every mesh RPC of this job.
pub fn mesh_token(job_secret: &str) -> String {
    hmac_hex(job_secret.as_bytes(), "mesh")
}

/// Ray's `RAY_AUTH_TOKEN` for this job's cluster.
pub fn ray_token(job_secret: &str) -> String {
    hmac_hex(job_secret.as_bytes(), "ray")
}

/// Constant-time comparison of two tokens.
pub fn tokens_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Writes a new random site key (64 hex chars, mode 0600) unless one exists.
pub fn keygen(path: &Path) -> anyhow::Result<bool> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(false);
    }
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(hex::encode(raw).as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_and_job_give_the_same_secret_on_every_node() {
        assert_eq!(job_secret(b"k", 42), job_secret(b"k", 42));
    }

    #[test]
    fn secrets_differ_between_jobs_and_keys() {
        assert_ne!(job_secret(b"k", 42), job_secret(b"k", 43));
        assert_ne!(job_secret(b"k", 42), job_secret(b"other", 42));
    }

    #[test]
    fn ray_and_mesh_tokens_differ_and_are_long_enough_for_ray() {
        let s = job_secret(b"k", 1);
        assert_ne!(mesh_token(&s), ray_token(&s));
        assert!(ray_token(&s).len() >= 32);
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abc", "abd"));
        assert!(!tokens_equal("abc", "ab"));
    }

    #[test]
    fn keygen_writes_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("site.key");
        assert!(keygen(&p).unwrap());
        let first = std::fs::read_to_string(&p).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!keygen(&p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), first);
    }
}
