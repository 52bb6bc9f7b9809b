//! Per-job secrets. The job's secret is derived from the root-only site key,
//! so every node's prolog computes the same value on its own without talking
//! to the others: job secret = HMAC-SHA256(site key, the job's id, user,
//! restart count and start time; see `job_secret`). The agents' mesh keys
//! (mutual TLS, `agent/mesh/tls.rs`) are derived from it; without the site
//! key nobody can compute another job's. Ray's auth token is not derived:
//! the head's agent makes it at random (`random_token`) and hands it to the
//! workers over the authenticated mesh, so it is fresh for every job even if
//! job ids repeat.
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

fn hmac_hex(key: &[u8], msg: &str) -> String {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(msg.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// The job's secret on every node of the job alike: from the site key, the
/// job's (cluster's) id and user, and how often and when Slurm started it, so
/// that a requeued job (same id) gets a fresh one. A heterogeneous job's
/// components start together and share the leader's id, so all derive one.
pub fn job_secret(site_key: &[u8], spec: &crate::job::JobSpec) -> String {
    let run = format!(
        "syndeo job {} uid {} restart {} start {}",
        spec.cluster(),
        spec.uid,
        spec.restart_count,
        spec.start_time
    );
    hmac_hex(site_key, &run)
}

/// 32 random bytes from the kernel, as 64 hex characters (Ray wants 32+).
pub fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    Ok(hex::encode(raw))
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

    fn spec(job: u32, uid: u32, node: usize) -> crate::job::JobSpec {
        let mut s = crate::job::simulated_spec(job, &["n1", "n2"], node);
        s.uid = uid;
        s
    }

    #[test]
    fn every_node_of_a_job_derives_the_same_secret() {
        assert_eq!(job_secret(b"k", &spec(42, 1000, 0)), job_secret(b"k", &spec(42, 1000, 1)));
    }

    #[test]
    fn secrets_differ_between_jobs_users_keys_and_runs_of_a_requeued_job() {
        let base = job_secret(b"k", &spec(42, 1000, 0));
        assert_ne!(base, job_secret(b"k", &spec(43, 1000, 0)));
        assert_ne!(base, job_secret(b"k", &spec(42, 1001, 0)));
        assert_ne!(base, job_secret(b"other", &spec(42, 1000, 0)));
        let mut requeued = spec(42, 1000, 0);
        requeued.restart_count = 1;
        assert_ne!(base, job_secret(b"k", &requeued));
    }

    #[test]
    fn random_tokens_are_fresh_and_long_enough_for_ray() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
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
