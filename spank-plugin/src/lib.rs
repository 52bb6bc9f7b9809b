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
//! All `unsafe` code is in [`ffi`].
pub mod agent_client;
pub mod config;
pub mod ffi;
pub mod hooks;
pub mod option;
