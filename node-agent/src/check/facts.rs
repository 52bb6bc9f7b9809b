//! What `check` reads of a node, behind one trait: the file system, the
//! kernel's settings, Slurm, and the probes run as an unprivileged user. The
//! checks decide from these alone, so each decision is unit-tested against a
//! fake node (`fake.rs`); `real.rs` is the node itself.
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::RuntimeKind;

/// What `check` needs of a node. Every method only reads, except
/// [`NodeFacts::probe`], which runs in a private temp dir it removes.
pub trait NodeFacts {
    /// `scontrol show config`: its `Key = value` lines.
    fn slurm_config(&self) -> Result<BTreeMap<String, String>>;
    /// The installed Slurm's version ("22.05.8"): `slurmd -V`, else `scontrol --version`.
    fn slurm_version(&self) -> Result<String>;
    /// A variable of `check`'s own environment (`SLURM_CONF`).
    fn env_var(&self, name: &str) -> Option<String>;
    /// A text file (configuration, /proc/sys), at most a few MiB.
    fn read_text(&self, path: &Path) -> io::Result<String>;
    /// The names in a directory.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The entry at `path`, a link not followed.
    fn lstat(&self, path: &Path) -> io::Result<FileInfo>;
    /// The file `path` leads to, links followed (a program on the PATH).
    fn stat(&self, path: &Path) -> io::Result<FileInfo>;
    /// A SPANK plugin's `plugin_version` symbol (Slurm's `SLURM_VERSION_NUMBER`).
    fn plugin_version(&self, so: &Path) -> Result<u32>;
    /// A secret file's bytes, opened without following a link.
    fn read_secret(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// This program's own path (the preload library lies beside it).
    fn agent_exe(&self) -> Option<PathBuf>;
    /// Runs `req` as `user` in a private temp dir.
    fn probe(&self, req: &ProbeRequest, user: &ProbeUser) -> Result<ProbeReport>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    CharDevice,
    Other,
}

/// The few fields of a `stat` the checks look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileInfo {
    pub kind: FileKind,
    pub uid: u32,
    /// Permission bits with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// For a device: its major and minor numbers.
    pub rdev: (u64, u64),
}

impl FileInfo {
    pub fn file(uid: u32, mode: u32) -> FileInfo {
        FileInfo { kind: FileKind::File, uid, mode, rdev: (0, 0) }
    }

    pub fn dir(uid: u32, mode: u32) -> FileInfo {
        FileInfo { kind: FileKind::Dir, uid, mode, rdev: (0, 0) }
    }

    pub fn char_device(mode: u32, rdev: (u64, u64)) -> FileInfo {
        FileInfo { kind: FileKind::CharDevice, uid: 0, mode, rdev }
    }

    /// Whether users other than the owner and group can write it.
    pub fn others_write(&self) -> bool {
        self.mode & 0o002 != 0
    }

    /// A root-owned entry only root can change.
    pub fn roots_alone(&self) -> bool {
        self.uid == 0 && self.mode & 0o022 == 0
    }
}

/// The unprivileged user the probes run as (`--as-user`, `nobody` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl ProbeUser {
    /// From the user database; root is refused (the probes test what users can do).
    pub fn lookup(name: &str) -> Result<ProbeUser> {
        let user = nix::unistd::User::from_name(name)
            .with_context(|| format!("looking up user {name}"))?
            .with_context(|| format!("there is no user {name} on this node; name one with --as-user"))?;
        if user.uid.is_root() {
            anyhow::bail!("--as-user {name} is root; the probes test what an unprivileged user can do");
        }
        Ok(ProbeUser { name: user.name, uid: user.uid.as_raw(), gid: user.gid.as_raw() })
    }
}

/// What a probe does as the unprivileged user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProbeRequest {
    /// Create a user namespace (`unshare(CLONE_NEWUSER)`).
    UserNamespace,
    /// `BINARY --version`, then start a container of the runtime: bubblewrap
    /// over the host's own root, read-only; Apptainer in `image` (none: no start).
    Runtime { kind: RuntimeKind, binary: PathBuf, image: Option<PathBuf> },
}

/// How one step of a probe went: `ok`, and what it printed or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub ok: bool,
    pub text: String,
}

impl Outcome {
    pub fn ok(text: impl Into<String>) -> Outcome {
        Outcome { ok: true, text: text.into() }
    }

    pub fn failed(text: impl Into<String>) -> Outcome {
        Outcome { ok: false, text: text.into() }
    }
}

/// A probe's findings; each step is `None` when it was not asked for or not tried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub userns: Option<Outcome>,
    pub version: Option<Outcome>,
    pub start: Option<Outcome>,
}
