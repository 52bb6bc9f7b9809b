//! Environment variables that cross between the plugin, the agent's exec
//! wrapper and the job's steps.

/// Set by the plugin's `task_init` for the exec wrapper: the program the task
/// was going to run (the wrapper runs it inside the image).
pub const EXEC_ARGV0: &str = "SYNDEO_EXEC_ARGV0";
/// Set with [`EXEC_ARGV0`]: the job directory whose agent gives the container command.
pub const EXEC_JOB_DIR: &str = "SYNDEO_EXEC_JOB_DIR";
/// Set instead when the job's cluster failed: the wrapper prints it and exits 1.
pub const EXEC_ERROR: &str = "SYNDEO_EXEC_ERROR";

/// In every step of a syndeo job: the job directory on this node.
pub const JOB_DIR: &str = "SYNDEO_JOB_DIR";

/// Marks every process of a syndeo job's cluster (the epilog looks for it).
pub const JOB_MARKER: &str = "SYNDEO_JOB_ID";

/// Names under which Slurm carries the `--syndeo` option in a job's
/// environment; a batch script that kept them would pass `--syndeo` to every
/// `srun` in it.
pub const OPTION_VARS: &[&str] =
    &["SLURM_SPANK__SLURM_SPANK_OPTION_syndeo_syndeo", "SPANK__SLURM_SPANK_OPTION_syndeo_syndeo", OPTION_RECORD];

/// Set (to anything) in a step's environment: the step starts without
/// waiting for the cluster (syndeo's own `status`/`logs` steps, which
/// report on a cluster that may still be starting).
pub const NO_WAIT: &str = "SYNDEO_NO_WAIT";

/// Slurm's own record of the option in a job's SPANK environment (the last
/// of [`OPTION_VARS`]).
pub const OPTION_RECORD: &str = "_SLURM_SPANK_OPTION_syndeo_syndeo";

/// sbatch and salloc record `--syndeo` in the job's SPANK environment under
/// this name instead of Slurm's own: the image, or "-" for the site's
/// default image. Slurm's record would also reach the salloc shell, and
/// every plain `srun` there would then run in the image.
pub const REQUEST_RECORD: &str = "SYNDEO_REQUEST";

/// At submit, the plugin records in the job's SPANK environment the
/// submitter's resource limits (`NAME=SOFT:HARD,...`, Slurm's names, "unlimited"
/// or a number) and umask (octal); the prolog sees them as `SPANK_<name>`.
pub const RLIMITS_RECORD: &str = "SYNDEO_RLIMITS";
pub const UMASK_RECORD: &str = "SYNDEO_UMASK";

/// What the root side reads of the prolog's and epilog's environment: the
/// plugin passes exactly these to `syndeo-agent` (which gets a clean
/// environment otherwise). Some exist only in some releases
/// (`SLURM_JOB_NODELIST` and `SLURM_JOB_START_TIME` from 24.11).
pub const JOB_SCRIPT_ENV: &[&str] = &[
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURMD_NODENAME",
    "SLURM_JOB_USER",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_JOB_WORK_DIR",
    "SLURM_JOB_GPUS",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_PARTITION",
    "SLURM_HET_JOB_ID",
    "SLURM_JOB_RESTART_COUNT",
    "SLURM_JOB_START_TIME",
    "SLURM_JOB_STDERR",
    "SLURM_CONF",
    "SPANK_SYNDEO_RLIMITS",
    "SPANK_SYNDEO_REQUEST",
    "SPANK_SYNDEO_UMASK",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_submit_records_reach_the_root_side_under_slurms_spank_prefix() {
        for record in [RLIMITS_RECORD, UMASK_RECORD, REQUEST_RECORD] {
            assert!(JOB_SCRIPT_ENV.contains(&format!("SPANK_{record}").as_str()), "{record}");
        }
    }
}

/// In Ray's container: the ports the agent holds for the job's Ray
/// (`agent/ports.rs`), whose binds the preload library lets join the
/// holders. Written by [`held_ports_value`], read by [`is_held_port`].
pub const HELD_PORTS: &str = "SYNDEO_HELD_PORTS";

/// The value of [`HELD_PORTS`] for `ports`.
pub fn held_ports_value(ports: &[u16]) -> String {
    ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
}

/// Whether `port` is listed in a value of [`HELD_PORTS`]; port 0 (the
/// kernel's pick) never is.
pub fn is_held_port(value: &[u8], port: u16) -> bool {
    port != 0
        && value
            .split(|b| *b == b',')
            .any(|p| std::str::from_utf8(p).ok().and_then(|s| s.trim().parse().ok()) == Some(port))
}

#[cfg(test)]
mod held_ports_tests {
    use super::*;

    #[test]
    fn the_held_ports_the_agent_writes_are_the_ones_the_preload_library_reads() {
        let v = held_ports_value(&[20001, 31000]);
        assert!(is_held_port(v.as_bytes(), 20001) && is_held_port(v.as_bytes(), 31000));
        assert!(!is_held_port(v.as_bytes(), 2000) && !is_held_port(held_ports_value(&[]).as_bytes(), 20001));
        assert!(!is_held_port(b"0,20001", 0), "port 0 is the kernel's pick, never held");
        assert!(!is_held_port(b"x,y", 20001));
    }
}
