//! The agent's side of the job's Prometheus file on this node
//! (`syndeo_protocol::metrics`): once this node's Ray runs, its metrics
//! endpoint (the held `--metrics-export-port` on Ray's address) and role go
//! into the file root's prolog made for the job's user; when Ray stops, the
//! file says no target again. The agent cannot rename in root's directory,
//! so it writes the whole fixed-size record at offset 0 in one write: the
//! file never shrinks or empties under Prometheus' reader, and a read that
//! met a write half done is refused by Prometheus, which keeps the file's
//! last targets until the write's own change event has it read again.
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use nix::fcntl::OFlag;
use syndeo_protocol::metrics::{encode, file_name, MetricsTarget, Role, RECORD_SIZE};

use crate::job::JobSpec;

/// The job's file on this node, when the site has `metrics_sd_dir`.
pub fn path(spec: &JobSpec) -> Option<Result<PathBuf, String>> {
    let dir = &spec.config.metrics_sd_dir;
    if dir.as_os_str().is_empty() {
        return None;
    }
    Some(file_name(spec.job_id, &spec.node).map(|n| dir.join(n)))
}

/// Says `target` (Ray's metrics address) with `role` in the job's file; a
/// no-op without `metrics_sd_dir`.
pub fn publish(spec: &JobSpec, role: Role, target: SocketAddr) -> Result<(), String> {
    let t = MetricsTarget { job_id: spec.job_id, user: spec.user.clone(), node: spec.node.clone(), role, target };
    write(spec, Some(&t))
}

/// Says no target (this node's Ray stopped); a no-op without `metrics_sd_dir`.
pub fn withdraw(spec: &JobSpec) -> Result<(), String> {
    write(spec, None)
}

fn write(spec: &JobSpec, target: Option<&MetricsTarget>) -> Result<(), String> {
    let Some(path) = path(spec) else { return Ok(()) };
    let path = path?;
    let bytes = encode(target)?;
    let shown = path.display().to_string();
    let f = open(&path).map_err(|e| format!("{shown}: {e}"))?;
    f.write_all_at(&bytes, 0).map_err(|e| format!("writing {shown}: {e}"))?;
    if f.metadata().is_ok_and(|m| m.len() != RECORD_SIZE as u64) {
        f.set_len(RECORD_SIZE as u64).map_err(|e| format!("{shown}: {e}"))?;
    }
    Ok(())
}

/// The file root made for this user: opened for writing, never created,
/// never through a link, and only if it is a regular file of this uid.
fn open(path: &std::path::Path) -> std::io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)?;
    let m = f.metadata()?;
    if !m.file_type().is_file() || m.uid() != nix::unistd::geteuid().as_raw() {
        return Err(std::io::Error::other("not the job's file from root's prolog"));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syndeo_protocol::metrics::decode;

    fn spec_in(dir: &std::path::Path) -> JobSpec {
        let mut s = crate::job::simulated_spec(42, &["n1", "n2"], 1);
        s.config.metrics_sd_dir = dir.to_path_buf();
        s
    }

    #[test]
    fn the_agent_fills_roots_file_in_place_and_empties_it_and_never_makes_one() {
        let d = tempfile::tempdir().unwrap();
        let spec = spec_in(d.path());
        let path = path(&spec).unwrap().unwrap();
        assert_eq!(path, d.path().join("syndeo-42-n2.json"));
        let addr: SocketAddr = "10.0.0.2:20004".parse().unwrap();
        assert!(publish(&spec, Role::Worker, addr).is_err(), "no file from root: none is made");
        assert!(!path.exists());
        std::fs::write(&path, encode(None).unwrap()).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        publish(&spec, Role::Worker, addr).unwrap();
        let got = decode(&std::fs::read(&path).unwrap()).unwrap().unwrap();
        assert_eq!((got.role, got.target, got.node.as_str(), got.job_id), (Role::Worker, addr, "n2", 42));
        withdraw(&spec).unwrap();
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), None);
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.ino(), m.len()), (inode, RECORD_SIZE as u64), "the same file, the same size");
    }

    #[test]
    fn a_link_in_the_files_place_is_not_written_through_and_without_the_setting_nothing_happens() {
        let d = tempfile::tempdir().unwrap();
        let spec = spec_in(d.path());
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, path(&spec).unwrap().unwrap()).unwrap();
        assert!(withdraw(&spec).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let mut off = spec.clone();
        off.config.metrics_sd_dir = PathBuf::new();
        assert!(path(&off).is_none() && withdraw(&off).is_ok());
    }
}
