//! What the prolog asks of the node and of Slurm (the user database, the
//! site configuration and key, the controller, the job's directories and
//! mounts, the note, the state, draining, the environment), as one trait,
//! so that its decisions can be tested with a fake (`fake_ops.rs`). The
//! real one, [`System`], calls the root-side functions as they are.
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::hetjob::LayoutError;
use super::privdrop::Identity;
use super::state::{JobState, StateDir};
use super::{dirs, drain, hetjob, metrics_sd, mounts, note, sitekey};
use crate::config::{Config, ConfigError};

pub trait PrologOps {
    /// A root-owned base directory, opened (`dirs::ensure_root_base`).
    type Base;
    /// The job user's identity from the user database.
    fn identity(&self, uid: u32, gid: u32) -> Result<Identity>;
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError>;
    /// The temp base for this node (`job_container::node_temp_base`).
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String>;
    /// A variable of this process's environment (slurmd's prolog environment).
    fn env(&self, name: &str) -> Option<String>;
    /// The controller's lines about heterogeneous job `leader` (`hetjob::query`).
    fn query_het_job(&self, leader: u32) -> Result<String, LayoutError>;
    fn read_site_key(&self, path: &Path) -> Result<Vec<u8>>;
    /// Makes (or checks) `base` as root's, mode 0755, and opens it.
    fn ensure_root_base(&self, base: &Path) -> Result<Self::Base>;
    /// Makes `base/name`, owned by `uid:gid` (`dirs::make_job_dir`).
    fn make_job_dir(&self, parent: &Self::Base, base: &Path, name: &str, uid: u32, gid: u32) -> Result<()>;
    /// Unmounts `target` if it is a mount point.
    fn unmount(&self, target: &Path) -> Result<()>;
    fn mount_tmpfs(&self, target: &Path, size_mb: u64, uid: u32, gid: u32, exec: bool) -> Result<()>;
    fn clear_note(&self, runtime_base: &Path, job: u32) -> Result<()>;
    fn write_note(&self, runtime_base: &Path, job: u32, owner: (u32, u32), message: &str) -> Result<()>;
    /// A file's text, empty when it cannot be read (gres.conf).
    fn read_text(&self, path: &Path) -> String;
    /// The node addresses the plugin sends on stdin, as it sent them.
    fn node_addresses(&self) -> Result<String>;
    fn make_metrics_file(&self, dir: &Path, job: u32, node: &str, owner: (u32, u32)) -> Result<()>;
    /// Makes the job's state directory afresh and saves `state` in it.
    fn save_state(&self, runtime_base: &Path, state: &JobState) -> Result<()>;
    /// Drains `node` with a reason naming `cause` (reports, never fails).
    fn drain(&self, node: &str, cause: &str);
}

/// The node itself.
pub struct System;

impl PrologOps for System {
    type Base = File;

    fn identity(&self, uid: u32, gid: u32) -> Result<Identity> {
        Identity::lookup(uid, gid)
    }
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError> {
        Config::load(path)
    }
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String> {
        crate::job_container::node_temp_base(config)
    }
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn query_het_job(&self, leader: u32) -> Result<String, LayoutError> {
        hetjob::query(leader)
    }
    fn read_site_key(&self, path: &Path) -> Result<Vec<u8>> {
        sitekey::read(path)
    }
    fn ensure_root_base(&self, base: &Path) -> Result<File> {
        dirs::ensure_root_base(base, 0o755)
    }
    fn make_job_dir(&self, parent: &File, base: &Path, name: &str, uid: u32, gid: u32) -> Result<()> {
        dirs::make_job_dir(parent, base, name, uid, gid)
    }
    fn unmount(&self, target: &Path) -> Result<()> {
        mounts::unmount(target)
    }
    fn mount_tmpfs(&self, target: &Path, size_mb: u64, uid: u32, gid: u32, exec: bool) -> Result<()> {
        mounts::mount_tmpfs(target, size_mb, uid, gid, exec)
    }
    fn clear_note(&self, runtime_base: &Path, job: u32) -> Result<()> {
        note::clear(runtime_base, job)
    }
    fn write_note(&self, runtime_base: &Path, job: u32, owner: (u32, u32), message: &str) -> Result<()> {
        note::write(runtime_base, job, owner, message)
    }
    fn read_text(&self, path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }
    fn node_addresses(&self) -> Result<String> {
        let mut text = String::new();
        std::io::stdin().take(64 << 20).read_to_string(&mut text).context("reading the node addresses")?;
        Ok(text)
    }
    fn make_metrics_file(&self, dir: &Path, job: u32, node: &str, owner: (u32, u32)) -> Result<()> {
        metrics_sd::make(dir, job, node, owner)
    }
    fn save_state(&self, runtime_base: &Path, state: &JobState) -> Result<()> {
        StateDir::create(runtime_base, state.spec.job_id)?.save(state)
    }
    fn drain(&self, node: &str, cause: &str) {
        drain::drain(node, cause)
    }
}
