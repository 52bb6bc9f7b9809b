//! The plugin's arguments from plugstack.conf, e.g.
//! `required /usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so agent=/usr/libexec/syndeo/syndeo-agent`.
//! Everything else is in the agent's config file (`config=`), which the
//! plugin never parses: the agent reads it, as root in the prolog.

use std::path::PathBuf;
use std::time::Duration;

use syndeo_protocol::layout::{JobDir, DEFAULT_AGENT, DEFAULT_CONFIG, DEFAULT_RUNTIME_BASE};

#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The `syndeo-agent` binary (root-owned, installed by the package).
    pub agent: PathBuf,
    /// The agent's config file, passed on to it.
    pub config: PathBuf,
    /// Root-owned directory holding one runtime directory per job.
    pub runtime_base: PathBuf,
    /// Upper bound on how long a job step waits for its node's agent.
    pub wait_timeout: Duration,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            agent: DEFAULT_AGENT.into(),
            config: DEFAULT_CONFIG.into(),
            runtime_base: DEFAULT_RUNTIME_BASE.into(),
            wait_timeout: Duration::from_secs(900),
        }
    }
}

pub const KNOWN_ARGS: &str = "agent=, config=, runtime_base=, wait_timeout=";

impl PluginConfig {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut c = PluginConfig::default();
        for arg in args {
            let (key, value) = arg.split_once('=').ok_or_else(|| {
                format!("syndeo: plugstack argument \"{arg}\" is not key=value (known: {KNOWN_ARGS})")
            })?;
            let abs = |v: &str| -> Result<PathBuf, String> {
                if v.starts_with('/') {
                    Ok(PathBuf::from(v))
                } else {
                    Err(format!("syndeo: plugstack argument {key}= needs an absolute path, got \"{v}\""))
                }
            };
            match key {
                "agent" => c.agent = abs(value)?,
                "config" => c.config = abs(value)?,
                "runtime_base" => c.runtime_base = abs(value)?,
                "wait_timeout" => {
                    let secs: u64 = value.parse().map_err(|_| {
                        format!("syndeo: plugstack argument wait_timeout=\"{value}\" is not a number of seconds")
                    })?;
                    c.wait_timeout = Duration::from_secs(secs);
                }
                _ => return Err(format!("syndeo: unknown plugstack argument \"{key}\" (known: {KNOWN_ARGS})")),
            }
        }
        Ok(c)
    }

    /// This job's runtime directory on this node.
    pub fn job_dir(&self, job_id: u32) -> JobDir {
        JobDir::new(&self.runtime_base, job_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn no_arguments_give_the_packaged_defaults() {
        assert_eq!(PluginConfig::parse(&[]).unwrap(), PluginConfig::default());
    }

    #[test]
    fn known_arguments_are_applied() {
        let c = PluginConfig::parse(&args(&["agent=/opt/a", "runtime_base=/run/x", "wait_timeout=30"])).unwrap();
        assert_eq!(c.agent, PathBuf::from("/opt/a"));
        assert_eq!(c.job_dir(7).path(), std::path::Path::new("/run/x/7"));
        assert_eq!(c.wait_timeout, Duration::from_secs(30));
    }

    #[test]
    fn unknown_argument_is_an_error_naming_it() {
        let e = PluginConfig::parse(&args(&["colour=blue"])).unwrap_err();
        assert!(e.contains("unknown plugstack argument \"colour\""), "{e}");
    }

    #[test]
    fn relative_paths_and_bad_numbers_are_errors() {
        assert!(PluginConfig::parse(&args(&["agent=bin/agent"])).is_err());
        assert!(PluginConfig::parse(&args(&["wait_timeout=soon"])).is_err());
        assert!(PluginConfig::parse(&args(&["justaword"])).is_err());
    }
}
