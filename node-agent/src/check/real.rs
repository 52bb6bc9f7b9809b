//! [`NodeFacts`] of the node `check` runs on: its files (links never
//! followed where it matters), Slurm's commands (no shell, the system's
//! PATH, a time limit each), and the probes of `probe.rs`.
use std::collections::BTreeMap;
use std::fs::Metadata;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};
use nix::fcntl::OFlag;

use super::command::{last_words, run_bounded, PATH};
use super::facts::ProbeReport;
use super::slurm_conf::parse_show_config;
use super::{elf, probe, FileInfo, FileKind, NodeFacts, ProbeRequest, ProbeUser};

/// Slurm's commands wait this long for slurmctld at most.
const SLURM_LIMIT: Duration = Duration::from_secs(30);
/// The largest text file read (a slurm.conf with thousands of nodes fits).
const MAX_TEXT: u64 = 8 << 20;

pub struct RealNode;

impl RealNode {
    pub fn new() -> RealNode {
        RealNode
    }

    /// A Slurm command with the system's PATH and the caller's SLURM_CONF.
    fn slurm(&self, argv: &[&str]) -> Result<String> {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).env_clear().env("PATH", PATH);
        if let Some(conf) = self.env_var("SLURM_CONF") {
            cmd.env("SLURM_CONF", conf);
        }
        let o = run_bounded(&mut cmd, SLURM_LIMIT)?;
        if !o.status.success() {
            bail!("`{}` failed: {}", argv.join(" "), last_words(&o));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

impl Default for RealNode {
    fn default() -> Self {
        RealNode::new()
    }
}

fn info(m: &Metadata) -> FileInfo {
    let t = m.file_type();
    let kind = if t.is_symlink() {
        FileKind::Symlink
    } else if t.is_dir() {
        FileKind::Dir
    } else if t.is_file() {
        FileKind::File
    } else if t.is_char_device() {
        FileKind::CharDevice
    } else {
        FileKind::Other
    };
    let rdev = (nix::sys::stat::major(m.rdev()), nix::sys::stat::minor(m.rdev()));
    FileInfo { kind, uid: m.uid(), mode: m.mode() & 0o7777, rdev }
}

impl NodeFacts for RealNode {
    fn slurm_config(&self) -> Result<BTreeMap<String, String>> {
        Ok(parse_show_config(&self.slurm(&["scontrol", "show", "config"])?))
    }

    fn slurm_version(&self) -> Result<String> {
        let out = self.slurm(&["slurmd", "-V"]).or_else(|e| {
            tracing::debug!("{e:#}; asking scontrol");
            self.slurm(&["scontrol", "--version"])
        })?;
        match out.lines().next().and_then(|l| l.split_whitespace().last()) {
            Some(v) => Ok(v.to_string()),
            None => bail!("slurmd -V printed nothing"),
        }
    }

    fn env_var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn read_text(&self, path: &Path) -> io::Result<String> {
        let mut text = String::new();
        std::fs::File::open(path)?.take(MAX_TEXT).read_to_string(&mut text)?;
        Ok(text)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect()
    }

    fn lstat(&self, path: &Path) -> io::Result<FileInfo> {
        std::fs::symlink_metadata(path).map(|m| info(&m))
    }

    fn stat(&self, path: &Path) -> io::Result<FileInfo> {
        std::fs::metadata(path).map(|m| info(&m))
    }

    fn plugin_version(&self, so: &Path) -> Result<u32> {
        elf::plugin_version(so)
    }

    fn read_secret(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = std::fs::OpenOptions::new().read(true).custom_flags(OFlag::O_NOFOLLOW.bits()).open(path)?;
        let mut key = Vec::new();
        f.take(64 * 1024).read_to_end(&mut key)?;
        Ok(key)
    }

    fn agent_exe(&self) -> Option<PathBuf> {
        std::env::current_exe().ok()
    }

    fn probe(&self, req: &ProbeRequest, user: &ProbeUser) -> Result<ProbeReport> {
        probe::run(req, user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_seen_without_following_links_and_devices_with_their_numbers() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("l")).unwrap();
        let node = RealNode::new();
        assert_eq!(node.lstat(&d.path().join("l")).unwrap().kind, FileKind::Symlink);
        assert_eq!(node.stat(&d.path().join("l")).unwrap().kind, FileKind::Dir);
        let null = node.stat(Path::new("/dev/null")).unwrap();
        assert_eq!((null.kind, null.rdev, null.mode), (FileKind::CharDevice, (1, 3), 0o666));
    }

    #[test]
    fn a_secret_behind_a_link_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("k"), "secret").unwrap();
        std::os::unix::fs::symlink(d.path().join("k"), d.path().join("l")).unwrap();
        let node = RealNode::new();
        assert_eq!(node.read_secret(&d.path().join("k")).unwrap(), b"secret");
        assert!(node.read_secret(&d.path().join("l")).is_err());
    }
}
