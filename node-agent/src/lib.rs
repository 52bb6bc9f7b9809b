//! `syndeo-agent`: everything of syndeo that runs outside Slurm's processes,
//! as a library; `src/bin/syndeo-agent.rs` only parses the command line.
//!
//! The flow, in the order the modules run:
//! - [`root`]: `prolog` and `epilog`, as root, started by the SPANK plugin on
//!   every node: the job's directories and secrets, the privilege drop, the
//!   clean-up;
//! - [`supervisor`]: as the job user, keeps the node agent running;
//! - [`agent`]: the node agent: election, mesh, the cluster view, Ray;
//! - [`runtime`]: the container runtimes (Apptainer, bubblewrap) the agent
//!   runs Ray in;
//! - [`exec`] and [`user_cli`]: `srun --syndeo` tasks and the `syndeo` command.
//!
//! For admins: [`check`] (`syndeo-agent check`), a read-only look at a node.
//!
//! Shared by several: [`config`] (the site's syndeo.toml), [`job`] (the job as
//! a node sees it), [`fault`] (user fault vs node fault), [`alloc`],
//! [`hostlist`], [`secret`].
// The only `unsafe` is in [`pidfd`] (two system calls), which allows it.
#![deny(unsafe_code)]

pub mod agent;
pub mod alloc;
pub mod cgroup;
pub mod check;
pub mod cli;
pub mod config;
pub mod exec;
pub mod exec_session;
pub mod fault;
pub mod gres;
pub mod hostlist;
pub mod image_tree;
pub mod job;
pub mod job_container;
pub mod limits;
pub mod network;
pub mod node_conf;
pub mod pidfd;
pub mod root;
pub mod runtime;
pub mod secret;
pub mod slurm_conf;
pub mod supervisor;
pub mod user_cli;
