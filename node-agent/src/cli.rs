//! Command line of `syndeo-agent` (and of `syndeo`, the same binary for users).
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "syndeo", version, about = "syndeo: a Ray cluster as a property of a Slurm job")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// (root, from the SPANK prolog) set up this node for a job and start its agent
    Prolog(PrologArgs),
    /// (root, from the SPANK epilog) stop the job's cluster on this node and remove all of it
    Epilog(EpilogArgs),
    /// (the job user, started by `prolog`) keeps the node agent running
    #[command(hide = true)]
    Run {
        #[arg(long)]
        job_dir: PathBuf,
    },
    /// (the job user, started by `run`) the node agent itself
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        job_dir: PathBuf,
        /// This start is the Nth restart of an agent that ended unexpectedly ...
        #[arg(long, requires = "why")]
        restart: Option<u32>,
        /// ... and this is how it ended.
        #[arg(long)]
        why: Option<String>,
    },
    /// (root, at install) create the site key if it does not exist
    Keygen {
        #[arg(long, default_value = "/etc/syndeo/site.key")]
        path: PathBuf,
    },
    /// Inside a job: the cluster's head, nodes and state
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Inside a job: wait until the cluster is ready (exit 0) or failed (exit 1)
    Wait {
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Inside a job: run CMD in the job's image on this node (like `srun --syndeo CMD`)
    Exec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Inside a job: this node's agent and Ray logs, or NODE's
    Logs { node: Option<String> },
    /// (benchmark builds only) N simulated nodes' agents on loopback, Ray a no-op
    #[cfg(feature = "mesh-bench")]
    #[command(hide = true)]
    MeshBench {
        #[arg(long, value_delimiter = ',', default_values_t = [64, 256, 1024, 4096])]
        nodes: Vec<usize>,
    },
}

#[derive(Args, Debug)]
pub struct CommonArgs {
    #[arg(long)]
    pub job: u32,
    #[arg(long)]
    pub uid: u32,
    #[arg(long, default_value = "/etc/syndeo/syndeo.toml")]
    pub config: PathBuf,
    #[arg(long, default_value = "/run/syndeo")]
    pub runtime_base: PathBuf,
}

#[derive(Args, Debug)]
pub struct PrologArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long)]
    pub gid: u32,
    /// The value of --syndeo=IMAGE, if one was given.
    #[arg(long)]
    pub image: Option<String>,
}

#[derive(Args, Debug)]
pub struct EpilogArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}
