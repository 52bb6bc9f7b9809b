//! `syndeo-agent`: everything of syndeo that runs outside Slurm's processes.
//!
//! Flow: the SPANK plugin runs `prolog` (root) on each node, which starts
//! `run` (as the job user), which keeps `serve`, the node agent, running; the
//! agents elect a head and start Ray through a container runtime; the plugin
//! asks the local agent when the cluster is ready; `epilog` (root) tears it
//! all down. The same binary is the exec wrapper for `srun --syndeo` tasks
//! and the `syndeo` command for users.
mod agent;
mod alloc;
mod cli;
mod config;
mod exec;
mod hostlist;
mod job;
mod root;
mod runtime;
mod secret;
mod supervisor;
mod user_cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    if let Ok(argv0) = std::env::var(exec::EXEC_ARGV0_ENV) {
        // srun --syndeo: the plugin made this binary the task's program.
        return exec::run_wrapper(argv0);
    }
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Cmd::Prolog(a) => root::prolog::run(&a),
        cli::Cmd::Epilog(a) => root::epilog::run(&a),
        cli::Cmd::Run { job_dir } => supervisor::run(&job_dir),
        cli::Cmd::Serve { job_dir, restart, why } => agent::run(&job_dir, restart.zip(why)),
        cli::Cmd::Keygen { path } => secret::keygen(&path).map(|created| {
            if created {
                eprintln!("created site key {}", path.display());
            }
        }),
        cli::Cmd::Status { json } => user_cli::status(json),
        cli::Cmd::Wait { timeout } => user_cli::wait(timeout),
        cli::Cmd::Exec { cmd } => user_cli::exec(&cmd),
        cli::Cmd::Logs { node } => user_cli::logs(node.as_deref()),
        #[cfg(feature = "mesh-bench")]
        cli::Cmd::MeshBench { nodes } => agent::meshbench::run(&nodes),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("syndeo: {e:#}");
            ExitCode::FAILURE
        }
    }
}
