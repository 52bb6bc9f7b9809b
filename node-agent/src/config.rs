//! The site configuration, `/etc/syndeo/syndeo.toml` (see etc/syndeo.toml for
//! the annotated reference). Read by the root prolog, which copies the
//! resolved values into the job's spec; agents never read the file again.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Apptainer,
    Bubblewrap,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Container runtime: "apptainer" (production default) or "bubblewrap".
    pub runtime: RuntimeKind,
    /// Path of the apptainer (or singularity) binary.
    pub apptainer: PathBuf,
    /// Path of the bwrap binary.
    pub bwrap: PathBuf,
    /// Image used by `--syndeo` without `=IMAGE`; empty: none, the user must name one.
    pub default_image: String,
    /// When not empty, images must lie under one of these directories.
    pub allowed_image_dirs: Vec<PathBuf>,
    /// Ports the node agents listen on for each other, "LOW-HIGH".
    pub mesh_ports: String,
    /// Seconds from job start until the cluster must be ready.
    pub startup_timeout: u64,
    /// Seconds a node waits for a lower-ranked node's agent before passing over it.
    pub head_timeout: u64,
    /// Nodes that must join for the cluster to be ready; 0: all of the job's nodes.
    pub min_nodes: u32,
    /// Start Ray's dashboard, bound to the head node's address.
    pub dashboard: bool,
    /// Ray object store size per node, in MiB.
    pub object_store_mb: u64,
    /// Extra bind mounts, "SRC[:DST[:ro]]".
    pub extra_binds: Vec<String>,
    /// Root-owned parents of the per-job Ray temp dir and /dev/shm dir.
    pub temp_base: PathBuf,
    pub shm_base: PathBuf,
    /// Root-only key from which each job's secrets are derived.
    pub site_key: PathBuf,
    /// Seconds the epilog gives the agent to stop Ray gracefully.
    pub stop_grace: u64,
    /// Times a node's agent restarts its Ray after it died while the job ran.
    pub ray_restarts: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            runtime: RuntimeKind::Apptainer,
            apptainer: "/usr/bin/apptainer".into(),
            bwrap: "/usr/bin/bwrap".into(),
            default_image: String::new(),
            allowed_image_dirs: vec![],
            mesh_ports: "45000-45999".into(),
            startup_timeout: 300,
            head_timeout: 20,
            min_nodes: 0,
            dashboard: false,
            object_store_mb: 512,
            extra_binds: vec![],
            temp_base: "/tmp/syndeo".into(),
            shm_base: "/dev/shm/syndeo".into(),
            site_key: "/etc/syndeo/site.key".into(),
            stop_grace: 15,
            ray_restarts: 3,
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let c: Config = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        c.mesh_port_range().map_err(invalid)?;
        for (name, p) in [("temp_base", &c.temp_base), ("shm_base", &c.shm_base), ("site_key", &c.site_key)] {
            if !p.is_absolute() {
                return Err(invalid(format!("{name} must be an absolute path, got {}", p.display())));
            }
        }
        if c.startup_timeout == 0 || c.head_timeout == 0 {
            return Err(invalid("startup_timeout and head_timeout must be at least 1 second".into()));
        }
        if c.object_store_mb < 80 {
            return Err(invalid("object_store_mb must be at least 80 (Ray's minimum)".into()));
        }
        for b in &c.extra_binds {
            crate::runtime::Bind::parse(b).map_err(invalid)?;
        }
        Ok(c)
    }

    pub fn mesh_port_range(&self) -> Result<(u16, u16), String> {
        let bad = || format!("mesh_ports must be \"LOW-HIGH\" with 1024 <= LOW <= HIGH, got \"{}\"", self.mesh_ports);
        let (lo, hi) = self.mesh_ports.split_once('-').ok_or_else(bad)?;
        let (lo, hi): (u16, u16) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
        if lo < 1024 || hi < lo {
            return Err(bad());
        }
        Ok((lo, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::parse(s, Path::new("/etc/syndeo/syndeo.toml"))
    }

    #[test]
    fn empty_file_gives_defaults_with_apptainer() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.runtime, RuntimeKind::Apptainer);
    }

    #[test]
    fn shipped_reference_config_parses() {
        let text = include_str!("../../etc/syndeo.toml");
        parse(text).unwrap();
    }

    #[test]
    fn values_are_read() {
        let c = parse("runtime = \"bubblewrap\"\nmin_nodes = 2\nmesh_ports = \"50000-50010\"\n").unwrap();
        assert_eq!(c.runtime, RuntimeKind::Bubblewrap);
        assert_eq!(c.min_nodes, 2);
        assert_eq!(c.mesh_port_range().unwrap(), (50000, 50010));
    }

    #[test]
    fn unknown_key_is_an_error_naming_file_and_key() {
        let e = parse("runtme = \"bubblewrap\"").unwrap_err().to_string();
        assert!(e.contains("syndeo.toml") && e.contains("runtme"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(parse("runtime = \"docker\"").is_err());
        assert!(parse("mesh_ports = \"9-5\"").is_err());
        assert!(parse("temp_base = \"tmp\"").is_err());
        assert!(parse("object_store_mb = 10").is_err());
        assert!(parse("extra_binds = [\"relative:/x\"]").is_err());
    }
}
