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
pub const OPTION_VARS: &[&str] = &[
    "SLURM_SPANK__SLURM_SPANK_OPTION_syndeo_syndeo",
    "SPANK__SLURM_SPANK_OPTION_syndeo_syndeo",
    "_SLURM_SPANK_OPTION_syndeo_syndeo",
];

/// At submit, the plugin records in the job's SPANK environment the
/// submitter's resource limits (`NAME=SOFT:HARD,...`, Slurm's names, "unlimited"
/// or a number) and umask (octal); the prolog sees them as `SPANK_<name>`.
pub const RLIMITS_RECORD: &str = "SYNDEO_RLIMITS";
pub const UMASK_RECORD: &str = "SYNDEO_UMASK";
