//! What the hooks may ask of Slurm: the [`Spank`] trait. The plugin's only
//! real implementation is `ffi::Handle` over `spank_t`; the hooks'
//! tests use a fake (`hooks/fake.rs`). Nothing here is `unsafe` and nothing
//! here knows Slurm's C types.

/// Where the plugin is running; see `spank_context(3)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Local,
    Remote,
    Allocator,
    Slurmd,
    JobScript,
    Unknown,
}

/// The step id Slurm gives the batch script.
pub const BATCH_STEP: u32 = 0xffff_fffb;
/// The step id of the extern step (PrologFlags=Contain).
pub const EXTERN_STEP: u32 = 0xffff_fffc;
/// The step id of salloc's interactive step.
pub const INTERACTIVE_STEP: u32 = 0xffff_fffa;

/// A SPANK call that failed: which call, and Slurm's words for why.
#[derive(Debug, Clone, PartialEq)]
pub struct SpankError {
    pub call: &'static str,
    pub reason: String,
}

impl std::fmt::Display for SpankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.call, self.reason)
    }
}

/// The running Slurm's configuration, as far as syndeo needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunningConf {
    /// `PrologFlags=Contain`: every job has an extern step on every node.
    pub contain: bool,
    /// `PrologFlags=RunInJob` (23.11 and later): the prolog runs in the extern step.
    pub run_in_job: bool,
    /// `PropagateResourceLimits` / `...Except`, as Slurm's raw strings.
    pub propagate: Option<String>,
    pub propagate_except: Option<String>,
}

/// One hook's view of Slurm: the SPANK handle it was called with, Slurm's
/// log, and the little of Slurm's internals syndeo reads.
pub trait Spank {
    /// The plugin's arguments from plugstack.conf.
    fn args(&self) -> &[String];
    fn context(&self) -> Context;
    /// Registers `--syndeo` with Slurm.
    fn register_option(&self) -> Result<(), SpankError>;
    /// `None`: --syndeo was not given. `Some(None)`: given without a value.
    fn option_value(&self) -> Option<Option<String>>;

    fn job_id(&self) -> Result<u32, SpankError>;
    fn step_id(&self) -> Result<u32, SpankError>;
    fn uid(&self) -> Result<u32, SpankError>;
    fn gid(&self) -> Result<u32, SpankError>;

    /// A variable of the job's (or task's) environment; `Ok(None)` when unset.
    fn getenv(&self, name: &str) -> Result<Option<String>, SpankError>;
    /// Sets a variable in the job's (or task's) environment.
    fn setenv(&self, name: &str, value: &str) -> Result<(), SpankError>;
    fn unsetenv(&self, name: &str) -> Result<(), SpankError>;
    /// At submit: a variable of the job's SPANK environment, which the
    /// prolog sees as `SPANK_<name>`.
    fn job_control_setenv(&self, name: &str, value: &str) -> Result<(), SpankError>;
    /// At submit: removes a variable of the job's SPANK environment.
    fn job_control_unsetenv(&self, name: &str) -> Result<(), SpankError>;

    /// In `task_init`: replaces the task's program (argv[0]) with `program`
    /// and returns the program it replaced. The task's other arguments stay.
    fn replace_task_program(&self, program: &str) -> Result<String, SpankError>;

    /// `error:` line in the log of whatever runs the plugin (srun/sbatch's
    /// terminal, slurmd's log, or the step's stderr in slurmstepd).
    fn log_error(&self, msg: &str);
    fn log_info(&self, msg: &str);
    fn log_verbose(&self, msg: &str);

    /// The configuration Slurm parsed in this process (slurmd, slurmstepd).
    fn running_conf(&self) -> RunningConf;
    /// The node names of a hostlist expression, in order, each with its
    /// NodeAddr from the running configuration (None: Slurm does not know it).
    fn node_addresses(&self, hostlist: &str) -> Vec<(String, Option<String>)>;
    /// Adds `pid` to job `job`'s extern step on this node, as pam_slurm_adopt does.
    fn adopt_into_extern_step(&self, job: u32, pid: i32) -> Result<(), String>;
}
