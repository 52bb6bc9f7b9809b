//! The boundary between syndeo's SPANK plugin (`syndeo.so`) and its node agent
//! (`syndeo-agent`): what both sides must agree on, in one place.
//!
//! - [`layout`]: installed paths and the job directory's layout;
//! - [`env`]: environment variables that cross from one side to the other;
//! - [`image`]: the check of a `--syndeo=IMAGE` value (at submit and again as root);
//! - [`labels`]: a node's Slurm facts as Ray node labels (root fills them, the agent passes them);
//! - [`metrics`]: the Prometheus file_sd file of a job's Ray on a node;
//! - [`local`]: the messages of the agent's local socket, with a protocol version;
//! - [`client`]: the one synchronous client of that socket (plugin, exec wrapper, CLI);
//! - [`exit`]: what the root-side commands' exit statuses mean to the plugin;
//! - [`root`]: the root-side commands (`prolog`, `start`, `epilog`) as an argv;
//! - [`addresses`]: the node addresses the plugin sends the prolog on stdin;
//! - [`handshake`]: `start`'s "go" and "supervisor PID" lines;
//! - [`rlimits`]: the job's resource limits, by name, and their record.
//!
//! It depends on serde only, so that the plugin stays small.
#![forbid(unsafe_code)]

pub mod addresses;
pub mod client;
pub mod env;
pub mod exit;
pub mod handshake;
pub mod image;
pub mod labels;
pub mod layout;
pub mod local;
pub mod metrics;
pub mod rlimits;
pub mod root;
