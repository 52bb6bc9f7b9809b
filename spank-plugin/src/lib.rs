//! syndeo's SPANK plugin (`syndeo.so`).
//!
//! It adds `--syndeo[=IMAGE]` to srun, sbatch and salloc, and does only what
//! has to happen inside Slurm:
//! - submit side (`hooks::submit`): check the option's value before the job is queued;
//! - prolog/epilog (`hooks::job_script`, root): hand the node to `syndeo-agent prolog`
//!   / `syndeo-agent epilog`, which do the privileged set-up and the clean-up;
//! - job steps (`hooks::slurmstepd`, as the user): wait until the node's agent says the
//!   Ray cluster is ready, export `RAY_ADDRESS` and friends, and for `srun --syndeo`
//!   run the task through the container wrapper.
//!
//! Everything else, elections, containers and Ray, belongs to the agent.
//! All `unsafe` code is in [`ffi`], which holds the entry points. The hooks
//! see only two traits, [`spank::Spank`] (Slurm) and [`node::Node`] (this
//! process and node, `syndeo-agent`), and return a [`HookError`], which the
//! entry point reports once. Dependencies point one way: ffi -> hooks -> traits.
#![deny(unsafe_code)]

pub mod child;
pub mod config;
#[allow(unsafe_code)]
pub mod ffi;
pub mod hooks;
pub mod launch;
pub mod node;
pub mod spank;
pub mod system;

/// Why a hook failed: one message for the log of whatever runs the plugin
/// (srun/sbatch's terminal, slurmd's log, or the step's stderr).
#[derive(Debug, Clone, PartialEq)]
pub struct HookError(pub String);

impl<E: std::fmt::Display> From<E> for HookError {
    fn from(e: E) -> HookError {
        HookError(format!("syndeo: {e}"))
    }
}

pub type HookResult = Result<(), HookError>;
