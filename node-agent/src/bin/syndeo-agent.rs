//! `syndeo-agent` (and `syndeo`, the same binary for users): parses the
//! command line and hands it to the library (`node_agent`). When the SPANK
//! plugin made this binary an `srun --syndeo` task's program, it is the exec
//! wrapper instead.
use std::process::ExitCode;

use node_agent::cli::{self, Cmd};
use node_agent::{agent, check, exec, root, secret, supervisor, user_cli};
use syndeo_protocol::env;
use syndeo_protocol::root::RootRequest;

fn main() -> ExitCode {
    // First thing, before any secret or privileged descriptor is used: no
    // process of the user's may ptrace this one or take its descriptors
    // (the mesh's listening socket). exec made it dumpable again, unless the
    // binary is not readable by the user (installed 0711).
    if let Err(e) = root::privdrop::not_dumpable() {
        eprintln!("syndeo: {e:#}");
        return ExitCode::FAILURE;
    }
    // Started as /proc/self/exe, the kernel would name it "exe" in ps and ss.
    let _ = nix::sys::prctl::set_name(c"syndeo-agent");
    if let Ok(argv0) = std::env::var(env::EXEC_ARGV0) {
        return exec::run_wrapper(argv0);
    }
    let command = cli::parse(std::env::args_os().collect()).command;
    if let Some(request) = command.root_request() {
        let result = match request {
            Ok(RootRequest::Prolog(a)) => root::prolog::run(&a),
            Ok(RootRequest::Start(a)) => root::start::run(&a),
            Ok(RootRequest::Epilog(a)) => root::epilog::run(&a),
            Err(e) => {
                eprintln!("syndeo-agent: {e}");
                return ExitCode::from(2);
            }
        };
        return exit(result);
    }
    let result = match command {
        Cmd::Prolog(_) | Cmd::Start(_) | Cmd::Epilog(_) => unreachable!("a root-side request"),
        Cmd::Keygen { path } => secret::keygen_cli(&path),
        Cmd::Check(a) => check::run(&a),
        Cmd::CheckProbe(a) => check::probe::child(&a),
        Cmd::Supervise => supervisor::run(),
        Cmd::SaveLogs(a) => root::logs::run(&a),
        Cmd::Serve { image, restart, why } => agent::serve(image, restart.zip(why)),
        Cmd::Status { json } => user_cli::status(json),
        Cmd::Wait { timeout } => user_cli::wait(timeout),
        Cmd::Exec { cmd } => user_cli::exec(&cmd),
        Cmd::Env { timeout } => user_cli::env(timeout),
        Cmd::Logs { node, job } => user_cli::logs(node.as_deref(), job),
    };
    exit(result)
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("syndeo: {e:#}");
            ExitCode::FAILURE
        }
    }
}
