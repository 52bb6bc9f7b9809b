//! Slurm's per-job /tmp and /dev/shm (`job_container/tmpfs` in 22.05 and
//! 24.11, `namespace/tmpfs` from 25.11 on, both configured in
//! job_container.conf): where syndeo's Ray temp dir may live beside it.
//!
//! What Slurm does (read in its source, the same in 22.05, 24.11 and 26.05):
//! the job's extern step makes a mount namespace in which each of `Dirs=`
//! (default `/tmp,/dev/shm`) is a fresh directory of the job user's; every
//! job step (the batch script, each srun task) runs in it. The SPANK prolog
//! and epilog, and the extern step's `task_post_fork`, where syndeo starts
//! the agent, run in the node's own namespace (22.05 tries to join and finds
//! no namespace yet at the prolog, none left at the epilog). Slurm deletes
//! the namespace and everything in its private /tmp when the extern step
//! ends, before the epilog.
//!
//! So a temp dir under one of `Dirs` is the node's for Ray and the epilog, but
//! another, empty one for the job's steps: `srun --syndeo` (which binds it)
//! and drivers on the host (which need Ray's sockets in it) fail. syndeo's
//! default temp base, `/tmp/syndeo`, then moves to [`FALLBACK_TEMP_BASE`]; a
//! temp base the admin chose under `Dirs` fails the job with the fix.
use std::path::{Path, PathBuf};

use crate::config::{Config, DEFAULT_TEMP_BASE};

/// Where the default temp base moves when Slurm makes /tmp private per job:
/// a sticky shared directory on local disk, as /tmp is, that the plugin's
/// default `Dirs` leaves alone.
pub const FALLBACK_TEMP_BASE: &str = "/var/tmp/syndeo";

/// `Dirs`' default in Slurm (SLURM_TMPFS_DEF_DIRS); 22.05 has no `Dirs`.
const DEFAULT_DIRS: &str = "/tmp,/dev/shm";

/// The directories Slurm makes private to each job on this node, from
/// slurm.conf's text and job_container.conf's (empty when there is none);
/// empty when no such plugin is configured.
pub fn private_dirs(slurm_conf: &str, job_container_conf: &str) -> Vec<PathBuf> {
    let plugin = setting(slurm_conf, "NamespaceType").or_else(|| setting(slurm_conf, "JobContainerType"));
    if !plugin.is_some_and(|p| p.to_ascii_lowercase().contains("tmpfs")) {
        return vec![];
    }
    let dirs = setting(job_container_conf, "Dirs").unwrap_or_else(|| DEFAULT_DIRS.to_string());
    dirs.split(',').map(str::trim).filter(|d| d.starts_with('/')).map(PathBuf::from).collect()
}

/// The last `key=value` of a Slurm-style config text (keys case-insensitive,
/// `#` comments, several pairs on a line, as on job_container.conf's
/// `NodeName=... BasePath=... Dirs=...` lines).
fn setting(text: &str, key: &str) -> Option<String> {
    let mut found = None;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                if k.eq_ignore_ascii_case(key) {
                    found = Some(v.trim_matches('"').to_string());
                }
            }
        }
    }
    found
}

fn under(path: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().find(|d| path.starts_with(d)).cloned()
}

/// The parent of each job's temp dir on this node: `temp_base`, unless it
/// lies in a directory Slurm makes private per job. Then the default one
/// moves to [`FALLBACK_TEMP_BASE`], and one the admin set is an error naming
/// the fix (the job fails with it; the node stays in service).
pub fn temp_base(config: &Config, private: &[PathBuf]) -> Result<PathBuf, String> {
    let Some(dir) = under(&config.temp_base, private) else {
        return Ok(config.temp_base.clone());
    };
    let shown: Vec<String> = private.iter().map(|d| d.display().to_string()).collect();
    if config.temp_base == Path::new(DEFAULT_TEMP_BASE) && under(Path::new(FALLBACK_TEMP_BASE), private).is_none() {
        return Ok(FALLBACK_TEMP_BASE.into());
    }
    Err(format!(
        "syndeo's temp_base {} lies in {}, which Slurm's job container makes private to each job (Dirs={}): \
         the job's steps would not see Ray's files; ask the admins to set temp_base in syndeo.toml to a \
         root-owned directory outside those",
        config.temp_base.display(),
        dir.display(),
        shown.join(",")
    ))
}

/// This node's private directories, read from the running Slurm's files:
/// slurm.conf (`SLURM_CONF`, else /etc/slurm/slurm.conf) and
/// job_container.conf beside it. Unreadable files count as no plugin.
pub fn node_private_dirs(slurm_conf_env: Option<&str>) -> Vec<PathBuf> {
    let env = slurm_conf_env.filter(|s| !s.is_empty());
    let slurm = std::fs::read_to_string(crate::slurm_conf::path(env)).unwrap_or_default();
    let jc = std::fs::read_to_string(crate::slurm_conf::beside(env, "job_container.conf")).unwrap_or_default();
    private_dirs(&slurm, &jc)
}

/// [`temp_base`] for this node, as the prolog and the epilog both resolve it.
pub fn node_temp_base(config: &Config) -> Result<PathBuf, String> {
    temp_base(config, &node_private_dirs(std::env::var("SLURM_CONF").ok().as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_tmpfs_plugin_nothing_is_private() {
        assert!(private_dirs("ProctrackType=proctrack/cgroup\n", "Dirs=/tmp").is_empty());
        assert!(private_dirs("JobContainerType=job_container/none\n", "").is_empty());
    }

    #[test]
    fn each_releases_setting_and_dirs_are_read_with_slurms_default() {
        let jc = "AutoBasePath=true\nBasePath=/var/spool/slurmd/tmpfs\n";
        let want: Vec<PathBuf> = vec!["/tmp".into(), "/dev/shm".into()];
        assert_eq!(private_dirs("JobContainerType=job_container/tmpfs\n", jc), want);
        assert_eq!(private_dirs("namespacetype=namespace/tmpfs # 25.11 on\n", jc), want);
        let jc = "NodeName=node[1-3] BasePath=/local/ns Dirs=/tmp,/var/tmp,/dev/shm\n";
        let dirs = private_dirs("JobContainerType=job_container/tmpfs", jc);
        assert_eq!(dirs, vec![PathBuf::from("/tmp"), "/var/tmp".into(), "/dev/shm".into()]);
    }

    #[test]
    fn the_default_temp_base_moves_out_of_a_private_tmp_and_a_chosen_one_is_refused() {
        let private: Vec<PathBuf> = vec!["/tmp".into(), "/dev/shm".into()];
        let mut c = Config::default();
        assert_eq!(temp_base(&c, &[]).unwrap(), PathBuf::from("/tmp/syndeo"));
        assert_eq!(temp_base(&c, &private).unwrap(), PathBuf::from(FALLBACK_TEMP_BASE));
        c.temp_base = "/local/syndeo".into();
        assert_eq!(temp_base(&c, &private).unwrap(), PathBuf::from("/local/syndeo"));
        c.temp_base = "/tmp/ray-jobs".into();
        let e = temp_base(&c, &private).unwrap_err();
        assert!(e.contains("/tmp/ray-jobs") && e.contains("Dirs=/tmp,/dev/shm") && e.contains("temp_base"), "{e}");
        // A site that makes /var/tmp private too: the default cannot move there.
        let all: Vec<PathBuf> = vec!["/tmp".into(), "/var/tmp".into()];
        assert!(temp_base(&Config::default(), &all).is_err());
        // "/tmpfoo" is not under "/tmp".
        c.temp_base = "/tmpfoo/syndeo".into();
        assert!(temp_base(&c, &private).is_ok());
    }
}
