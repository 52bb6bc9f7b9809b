//! The command line of `syndeo-agent`, and of `syndeo` (the same binary,
//! installed under that name for users). `syndeo --help` lists only the
//! users' commands; the root side's (`prolog`, `epilog`, `keygen`, `check`) show under
//! `syndeo-agent --help`, and the processes the root side starts for a job
//! (`supervise`, `serve`) under neither.
use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use syndeo_protocol::layout::DEFAULT_CONFIG;
use syndeo_protocol::root::RootRequest;

#[derive(Parser, Debug)]
#[command(name = "syndeo", version, about = "syndeo: a Ray cluster as a property of a Slurm job")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
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
        cmd: Vec<OsString>,
    },
    /// Inside a job: `export` lines for the cluster's variables: eval "$(syndeo env)"
    Env {
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// This node's agent and Ray logs in a job, or NODE's; --job N: a finished job's
    Logs {
        node: Option<String>,
        /// A finished job's logs, kept in its work directory (syndeo-N/)
        #[arg(long)]
        job: Option<u32>,
    },
    /// (root, from the SPANK prolog) set up this node for a job and start its agent
    Prolog(RootArgs),
    /// (root, from the SPANK epilog) stop the job's cluster on this node and remove all of it
    Epilog(RootArgs),
    /// (root, at install) create the site key if it does not exist
    Keygen {
        #[arg(long, default_value = "/etc/syndeo/site.key")]
        path: PathBuf,
    },
    /// (root, from the SPANK plugin) start the node agent of a prepared job
    Start(RootArgs),
    /// (root, on a node) check this node's setup for syndeo, read-only; exit 1 on any FAIL
    Check(CheckArgs),
    /// (started by `check`, becomes an unprivileged user) tries what a job's user needs
    #[command(hide = true)]
    CheckProbe(ProbeArgs),
    /// (started by `start`, becomes the job user) keeps the node agent running
    #[command(hide = true)]
    Supervise,
    /// (started by `epilog`, becomes the job user) copy this node's logs into the job's work directory
    #[command(hide = true)]
    SaveLogs(SaveLogsArgs),
    /// (the job user, started by `supervise`) the node agent itself
    #[command(hide = true)]
    Serve {
        /// The image, as the supervisor resolved it at the job's start.
        #[arg(long)]
        image: Option<PathBuf>,
        /// This start is the Nth restart of an agent that ended unexpectedly ...
        #[arg(long, requires = "why")]
        restart: Option<u32>,
        /// ... and this is how it ended.
        #[arg(long)]
        why: Option<String>,
    },
}

/// The root side's commands: hidden from `syndeo --help`.
const ROOT_COMMANDS: &[&str] = &["prolog", "start", "epilog", "keygen", "check"];

/// The arguments of `prolog`, `start` and `epilog`: what the plugin sent,
/// read by [`RootRequest::decode`] (`syndeo_protocol::root`), never here.
#[derive(Args, Debug)]
pub struct RootArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, help = syndeo_protocol::root::ARGS_HELP)]
    pub args: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// One JSON array of {name, status, detail, fix}, for monitoring
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// The unprivileged user the probes (a user namespace, a container) run as
    #[arg(long, default_value = "nobody")]
    pub as_user: String,
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
    /// What to try, as JSON (`check::ProbeRequest`).
    #[arg(long)]
    pub request: String,
}

#[derive(Args, Debug)]
pub struct SaveLogsArgs {
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
    #[arg(long)]
    pub job: u32,
    #[arg(long)]
    pub node: String,
    #[arg(long)]
    pub job_dir: PathBuf,
    #[arg(long)]
    pub temp_dir: PathBuf,
    #[arg(long)]
    pub workdir: PathBuf,
    #[arg(long)]
    pub max_mb: u64,
}

impl Cmd {
    /// A root-side command as the plugin's request, or None for the others.
    pub fn root_request(&self) -> Option<Result<RootRequest, String>> {
        let (verb, a) = match self {
            Cmd::Prolog(a) => ("prolog", a),
            Cmd::Start(a) => ("start", a),
            Cmd::Epilog(a) => ("epilog", a),
            _ => return None,
        };
        Some(RootRequest::decode(std::iter::once(verb.into()).chain(a.args.iter().cloned())))
    }
}

/// Parses `args` (argv[0] first). Run as `syndeo`, the help shows users' commands only.
pub fn parse(args: Vec<OsString>) -> Cli {
    let invoked_as = args.first().map(std::path::Path::new).and_then(|p| p.file_name()).map(|n| n.to_owned());
    let mut cmd = Cli::command();
    if invoked_as.as_deref() != Some(std::ffi::OsStr::new("syndeo-agent")) {
        for name in ROOT_COMMANDS {
            cmd = cmd.mut_subcommand(name, |s| s.hide(true));
        }
    } else {
        cmd = cmd.name("syndeo-agent");
    }
    let matches = cmd.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(argv0: &str) -> String {
        let mut cmd = Cli::command();
        if argv0 == "syndeo" {
            for name in ROOT_COMMANDS {
                cmd = cmd.mut_subcommand(name, |s| s.hide(true));
            }
        }
        cmd.render_help().to_string()
    }

    #[test]
    fn users_help_lists_only_their_commands_and_the_agents_lists_the_root_side_too() {
        let user = help("syndeo");
        for c in ["status", "wait", "exec", "logs"] {
            assert!(user.contains(c), "{user}");
        }
        for c in ["prolog", "epilog", "keygen", "check", "supervise", "serve"] {
            assert!(!user.contains(c), "{c} in: {user}");
        }
        let admin = help("syndeo-agent");
        assert!(admin.contains("prolog") && admin.contains("keygen") && !admin.contains("supervise"), "{admin}");
        assert!(admin.contains("check") && !admin.contains("check-probe"), "{admin}");
    }

    #[test]
    fn check_takes_json_a_config_and_a_probe_user_defaulting_to_nobody() {
        let cli = Cli::try_parse_from(["syndeo-agent", "check"]).unwrap();
        match cli.command {
            Cmd::Check(a) => {
                assert!(!a.json && a.as_user == "nobody" && a.config == std::path::Path::new(DEFAULT_CONFIG))
            }
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["syndeo-agent", "check", "--json", "--as-user", "syndeo-a"]).unwrap();
        assert!(matches!(cli.command, Cmd::Check(a) if a.json && a.as_user == "syndeo-a"));
    }

    fn read(argv: Vec<OsString>) -> RootRequest {
        let cli = Cli::try_parse_from(std::iter::once("syndeo-agent".into()).chain(argv)).unwrap();
        cli.command.root_request().expect("a root-side command").unwrap()
    }

    #[test]
    fn an_image_value_that_starts_with_a_dash_is_one_argument() {
        let argv = ["prolog", "--job=1", "--uid=2", "--gid=3", "--image=-rf"].map(OsString::from).to_vec();
        match read(argv) {
            RootRequest::Prolog(a) => assert_eq!(a.image.as_deref(), Some("-rf")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_agents_command_line_reads_back_every_request_the_plugin_encodes() {
        use syndeo_protocol::root::{Common, Prolog, Start};
        let common = Common { job: 42, uid: 1000, config: "/etc/s.toml".into(), runtime_base: "/run/s y".into() };
        let prolog = |image: Option<&str>, propagate: &[&str]| {
            RootRequest::Prolog(Prolog {
                common: common.clone(),
                gid: 100,
                image: image.map(String::from),
                propagate: propagate.iter().map(|s| s.to_string()).collect(),
            })
        };
        let all: Vec<&str> = syndeo_protocol::rlimits::names().collect();
        for r in [
            prolog(Some("/img/ray.sif"), &["CORE", "NOFILE"]),
            prolog(Some("--help"), &[]),
            prolog(None, &all),
            RootRequest::Start(Start { common: common.clone(), hold: true }),
            RootRequest::Start(Start { common: common.clone(), hold: false }),
            RootRequest::Epilog(common.clone()),
        ] {
            assert_eq!(read(r.encode()), r);
        }
        assert!(Cmd::Status { json: false }.root_request().is_none());
    }
}
