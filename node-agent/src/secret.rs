//! Per-job secrets. The mesh's bearer token is derived from the site key, so
//! every node's prolog computes the same value on its own without talking to
//! the others: job secret = HMAC-SHA256(site key, "syndeo job <id> uid <uid>"),
//! mesh token = HMAC(job secret, "mesh"). Without the root-only site key nobody
//! can compute another job's token. Ray's auth token is not derived: the head's
//! agent makes it at random (`random_token`) and hands it to the workers over
//! the authenticated mesh, so it is fresh for every job even if job ids repeat.
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

fn hmac_hex(key: &[u8], msg: &str) -> String {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(msg.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

pub fn job_secret(site_key: &[u8], job_id: u32, uid: u32) -> String {
    hmac_hex(site_key, &format!("syndeo job {job_id} uid {uid}"))
}

/// Bearer token on every mesh RPC of this job.
pub fn mesh_token(job_secret: &str) -> String {
    hmac_hex(job_secret.as_bytes(), "mesh")
}

/// 32 random bytes from the kernel, as 64 hex characters (Ray wants 32+).
pub fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    Ok(hex::encode(raw))
}

/// Constant-time comparison of two tokens.
pub fn tokens_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `syndeo-agent keygen`: makes the site key unless there is one, and says so.
pub fn keygen_cli(path: &Path) -> anyhow::Result<()> {
    if keygen(path)? {
        eprintln!("created site key {}", path.display());
    }
    Ok(())
}

/// Writes a new random site key (64 hex chars, mode 0600) unless one exists.
pub fn keygen(path: &Path) -> anyhow::Result<bool> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(false);
    }
    let key = random_token()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(key.as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_and_job_give_the_same_secret_on_every_node() {
        assert_eq!(job_secret(b"k", 42, 1000), job_secret(b"k", 42, 1000));
    }

    #[test]
    fn secrets_differ_between_jobs_users_and_keys() {
        assert_ne!(job_secret(b"k", 42, 1000), job_secret(b"k", 43, 1000));
        assert_ne!(job_secret(b"k", 42, 1000), job_secret(b"k", 42, 1001));
        assert_ne!(job_secret(b"k", 42, 1000), job_secret(b"other", 42, 1000));
    }

    #[test]
    fn random_tokens_are_fresh_and_long_enough_for_ray() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(mesh_token(&job_secret(b"k", 1, 1000)), a);
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
