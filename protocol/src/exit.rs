//! What `syndeo-agent prolog | start | epilog` tell the plugin by their exit
//! status. Anything not named here is a node fault: the plugin fails the
//! hook (Slurm drains the node; the agent has named the fault already).

/// Done (a user's mistake included: the job's steps report it).
pub const OK: i32 = 0;
/// The epilog finished but could not remove everything of the job; it named
/// each path. The node stays in service: a job's content never drains it.
pub const NOT_CLEAN: i32 = 3;
