//! Where the running Slurm's configuration is: slurm.conf from `SLURM_CONF`
//! (the prolog's environment), else /etc/slurm/slurm.conf, and the files
//! Slurm reads beside it (gres.conf, job_container.conf).
use std::path::{Path, PathBuf};

/// slurm.conf, from `SLURM_CONF` when set.
pub fn path(slurm_conf: Option<&str>) -> PathBuf {
    PathBuf::from(slurm_conf.unwrap_or("/etc/slurm/slurm.conf"))
}

/// The file `name` in slurm.conf's directory.
pub fn beside(slurm_conf: Option<&str>, name: &str) -> PathBuf {
    path(slurm_conf).parent().unwrap_or(Path::new("/etc/slurm")).join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_lie_beside_the_slurm_conf_slurm_runs_with_else_in_etc_slurm() {
        assert_eq!(path(None), PathBuf::from("/etc/slurm/slurm.conf"));
        assert_eq!(beside(Some("/run/slurm/conf/slurm.conf"), "gres.conf"), PathBuf::from("/run/slurm/conf/gres.conf"));
        assert_eq!(beside(None, "job_container.conf"), PathBuf::from("/etc/slurm/job_container.conf"));
    }
}
