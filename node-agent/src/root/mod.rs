//! Root-side commands, run by the SPANK plugin in the prolog and epilog.
//! They create and remove the job's directories without following links,
//! drop every privilege before anything of the user's runs, and find the
//! job's processes by PID and start time, never by name.
pub mod dirs;
pub mod drain;
pub mod epilog;
pub mod privdrop;
pub mod procs;
pub mod prolog;
