//! Root-side commands, run by the SPANK plugin: `prolog` (prepare the node
//! for a job), `start` (start its agent, from the job's extern step when
//! Slurm has one) and `epilog` (stop and remove everything of the job).
//! They create and remove the job's directories without following links,
//! drop every privilege in a child before anything of the user's runs, and
//! find the job's processes by PID and start time, never by name.
pub mod dirs;
pub mod drain;
pub mod epilog;
pub mod logs;
pub mod mounts;
pub mod privdrop;
pub mod procs;
pub mod prolog;
pub mod remove;
pub mod sitekey;
pub mod start;
pub mod state;
