//! A fake [`PrologOps`] for the prolog's tests: it answers what the test
//! scripted (environment, site configuration and key, the controller's
//! lines, the plugin's node addresses) and records, in order, what the
//! prolog did to the node, the note it left, the state it saved and the
//! drain it asked for.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use nix::unistd::Gid;
use syndeo_protocol::addresses::NodeAddresses;

use super::hetjob::LayoutError;
use super::ops::PrologOps;
use super::privdrop::Identity;
use super::state::JobState;
use crate::config::{Config, ConfigError};

pub struct FakeOps {
    /// The prolog's environment.
    pub env: BTreeMap<String, String>,
    /// The site configuration, or the message that makes it invalid.
    pub config: Result<Config, String>,
    /// What `job_container` says of the temp base (None: the config's own).
    pub temp_base: Option<Result<PathBuf, String>>,
    /// The controller's answer about a heterogeneous job (Err: squeue failed).
    pub squeue: Result<String, String>,
    pub site_key: Result<Vec<u8>, String>,
    /// The plugin's node addresses, by node name.
    pub addresses: BTreeMap<String, String>,
    /// Everything done to the node, in order ("mount /run/syndeo/42 64MB 1000:100 noexec", ...).
    pub calls: RefCell<Vec<String>>,
    pub notes: RefCell<Vec<String>>,
    pub saved: RefCell<Option<JobState>>,
    pub drained: RefCell<Vec<(String, String)>>,
}

impl FakeOps {
    /// A node `node1` whose site config, key and controller are all fine.
    pub fn new() -> Self {
        FakeOps {
            env: BTreeMap::from([("SLURMD_NODENAME".into(), "node1".into())]),
            config: Ok(Config::default()),
            temp_base: None,
            squeue: Err("squeue was not expected".into()),
            site_key: Ok(vec![b'k'; 64]),
            addresses: BTreeMap::new(),
            calls: RefCell::default(),
            notes: RefCell::default(),
            saved: RefCell::default(),
            drained: RefCell::default(),
        }
    }

    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.insert(name.into(), value.into());
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    /// Whether any recorded call starts with `prefix`.
    pub fn did(&self, prefix: &str) -> bool {
        self.calls.borrow().iter().any(|c| c.starts_with(prefix))
    }

    fn record(&self, call: String) {
        self.calls.borrow_mut().push(call);
    }
}

impl PrologOps for FakeOps {
    type Base = PathBuf;

    fn identity(&self, uid: u32, gid: u32) -> Result<Identity> {
        Ok(Identity { uid, gid, name: "alice".into(), groups: vec![Gid::from_raw(gid)] })
    }
    fn load_config(&self, path: &Path) -> Result<Config, ConfigError> {
        self.config.clone().map_err(|message| ConfigError::Invalid { path: path.into(), message })
    }
    fn node_temp_base(&self, config: &Config) -> Result<PathBuf, String> {
        self.temp_base.clone().unwrap_or_else(|| Ok(config.temp_base.clone()))
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
    fn query_het_job(&self, leader: u32) -> Result<String, LayoutError> {
        self.record(format!("squeue {leader}"));
        self.squeue.clone().map_err(LayoutError::Node)
    }
    fn read_site_key(&self, path: &Path) -> Result<Vec<u8>> {
        self.record(format!("site-key {}", path.display()));
        self.site_key.clone().map_err(|m| anyhow!(m))
    }
    fn ensure_root_base(&self, base: &Path) -> Result<PathBuf> {
        self.record(format!("base {}", base.display()));
        Ok(base.into())
    }
    fn make_job_dir(&self, parent: &PathBuf, base: &Path, name: &str, uid: u32, gid: u32) -> Result<()> {
        assert_eq!(parent, base, "a job dir is made in the base just opened");
        self.record(format!("mkdir {} {uid}:{gid}", base.join(name).display()));
        Ok(())
    }
    fn unmount(&self, target: &Path) -> Result<()> {
        self.record(format!("unmount {}", target.display()));
        Ok(())
    }
    fn mount_tmpfs(&self, target: &Path, size_mb: u64, uid: u32, gid: u32, exec: bool) -> Result<()> {
        let exec = if exec { "exec" } else { "noexec" };
        self.record(format!("mount {} {size_mb}MB {uid}:{gid} {exec}", target.display()));
        Ok(())
    }
    fn clear_note(&self, _runtime_base: &Path, job: u32) -> Result<()> {
        self.record(format!("clear-note {job}"));
        Ok(())
    }
    fn write_note(&self, _runtime_base: &Path, job: u32, (uid, gid): (u32, u32), message: &str) -> Result<()> {
        self.record(format!("note {job} {uid}:{gid}"));
        self.notes.borrow_mut().push(message.into());
        Ok(())
    }
    fn read_text(&self, _path: &Path) -> String {
        String::new()
    }
    fn node_addresses(&self) -> Result<String> {
        Ok(NodeAddresses(self.addresses.clone()).encode())
    }
    fn make_metrics_file(&self, dir: &Path, job: u32, node: &str, _owner: (u32, u32)) -> Result<()> {
        self.record(format!("metrics {} {job} {node}", dir.display()));
        Ok(())
    }
    fn save_state(&self, _runtime_base: &Path, state: &JobState) -> Result<()> {
        self.record(format!("save {}", state.spec.job_id));
        *self.saved.borrow_mut() = Some(state.clone());
        Ok(())
    }
    fn drain(&self, node: &str, cause: &str) {
        self.record(format!("drain {node}"));
        self.drained.borrow_mut().push((node.into(), cause.into()));
    }
}
