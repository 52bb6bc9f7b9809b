//! syndeo-mc: the minicluster's client (the tests' library, syndeo_tests)
//! as a command, for the benchmarks (bench/bench.py). Argument parsing and
//! printing only: every behaviour is the library's. The cluster is the one
//! SYNDEO_MINICLUSTER names (0 by default). On failure it says why on stderr
//! and exits non-zero.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Output};
use std::time::Duration;
use syndeo_tests as mc;

const USAGE: &str = "\
syndeo-mc COMMAND ...   (the cluster: SYNDEO_MINICLUSTER, 0 by default)
  facts                       the cluster, as JSON: instance, users, nodes and
                              their addresses, state dir, root prefix, logs ...
  workdir USER NAME           a fresh directory of USER's for NAME; its path
  write-file USER PATH        stdin into PATH, owned by USER
  sbatch USER DIR [ARG...]    the script on stdin, as USER in DIR; JSON: the
                              job's id and its stdout and stderr files
  state JOB                   the job's JobState
  wait JOB SECONDS [DIR]      until the job is over and its epilogs ran; its state
  cancel JOB                  scancel, as root
  node-field NODE NAME        a field of `scontrol show node`
  slurmd-log NODE             NODE's slurmd log
  in-node NODE [--] ARGV...   ARGV as root inside NODE (its output and status)
  restart                     slurmctld and every slurmd again
  slurm-argv USER DIR         JSON: the argv prefix that runs a Slurm client as
                              USER in DIR, nothing in between (for timing)
  node-argv NODE USER         JSON: the argv prefix that runs KEY=VALUE... ARGV
                              as USER inside NODE, nothing in between";

fn main() -> ExitCode {
    // The library panics with what went wrong: say that alone.
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let what = payload.downcast_ref::<&str>().map(|s| s.to_string());
        let what = what.or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_default();
        eprintln!("syndeo-mc: {what}");
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match run(&args) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("syndeo-mc: {why}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

const COMMANDS: &[&str] = &[
    "facts",
    "workdir",
    "write-file",
    "sbatch",
    "state",
    "wait",
    "cancel",
    "node-field",
    "slurmd-log",
    "in-node",
    "restart",
    "slurm-argv",
    "node-argv",
];

/// One command; Err is a usage error.
fn run(args: &[&str]) -> Result<ExitCode, String> {
    let (&command, rest) = args.split_first().ok_or("no command")?;
    if command == "help" || command == "--help" {
        let _ = writeln!(std::io::stdout(), "{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    if !COMMANDS.contains(&command) {
        return Err(format!("no command {command:?}"));
    }
    if !mc::is_up() {
        return not_up();
    }
    match (command, rest) {
        ("facts", []) => facts(),
        ("workdir", [user, name]) => println!("{}", mc::workdir(user, name).display()),
        ("write-file", [user, path]) => mc::write_file(user, Path::new(path), &stdin()),
        ("sbatch", [user, dir, sbatch_args @ ..]) => sbatch(user, dir, sbatch_args),
        ("state", [job]) => println!("{}", job_of(job, "/")?.field("JobState").unwrap_or_default()),
        ("wait", [job, secs]) => wait(job, secs, "/")?,
        ("wait", [job, secs, dir]) => wait(job, secs, dir)?,
        ("cancel", [job]) => return Ok(passed_on(mc::cancel(number(job)?))),
        ("node-field", [node, name]) => println!("{}", mc::node_field(node, name).unwrap_or_default()),
        ("slurmd-log", [node]) => print!("{}", mc::slurmd_log(node)),
        ("in-node", [node, argv @ ..]) => return in_node(node, argv),
        ("restart", []) => return Ok(passed_on(mc::restart())),
        ("slurm-argv", [user, dir]) => print_json(&mc::slurm_client_argv(user, Path::new(dir)).into()),
        ("node-argv", [node, user]) => print_json(&mc::in_node_as_user_argv(node, user).into()),
        _ => return Err(format!("cannot parse {args:?}")),
    }
    Ok(ExitCode::SUCCESS)
}

fn not_up() -> Result<ExitCode, String> {
    let k = mc::instance();
    eprintln!(
        "syndeo-mc: minicluster {k} is not up (no {}/nodes): run SYNDEO_MINICLUSTER={k} tests/cluster/minicluster up",
        mc::mc_state_dir()
    );
    Ok(ExitCode::FAILURE)
}

/// What the bench needs to know of the cluster, from its state directory.
fn facts() {
    let nodes: Vec<serde_json::Value> = mc::nodes()
        .iter()
        .map(|n| serde_json::json!({"name": n, "addr": mc::node_addr(n), "netns": mc::node_netns(n)}))
        .collect();
    let users = [mc::user_a(), mc::user_b()];
    let homes: serde_json::Map<String, serde_json::Value> =
        users.iter().map(|&u| (u.into(), mc::home(u).into())).collect();
    print_json(&serde_json::json!({
        "instance": mc::instance(),
        "state_dir": mc::mc_state_dir(),
        "users": users,
        "homes": homes,
        "nodes": nodes,
        "bridge_prefix": mc::bridge_prefix(),
        "fabric_prefix": mc::fabric_prefix(),
        "root_prefix": mc::root_prefix(),
        "slurm_log_dir": mc::slurm_log_dir(),
        "release": mc::release(),
        "runtime": mc::runtime(),
        "cgroups": mc::cgroup_mode(),
        "job_container": mc::job_container_mode(),
        "accounting": mc::accounting_mode(),
        "job_state_dirs": mc::state_dirs(),
    }));
}

fn sbatch(user: &str, dir: &str, args: &[&str]) {
    let job = mc::sbatch(user, Path::new(dir), args, &stdin());
    print_json(&serde_json::json!({
        "id": job.id,
        "stdout": job.stdout_path(),
        "stderr": job.stderr_path(),
    }));
}

fn wait(job: &str, secs: &str, dir: &str) -> Result<(), String> {
    let limit = Duration::from_secs_f64(secs.parse().map_err(|_| format!("not seconds: {secs:?}"))?);
    println!("{}", job_of(job, dir)?.wait(limit));
    Ok(())
}

fn in_node(node: &str, argv: &[&str]) -> Result<ExitCode, String> {
    let argv = argv.strip_prefix(&["--"]).unwrap_or(argv);
    if argv.is_empty() {
        return Err("in-node: no command".into());
    }
    Ok(passed_on(mc::in_node(node, argv)))
}

/// A job the caller names by its id; `dir` holds its output files.
fn job_of(id: &str, dir: &str) -> Result<mc::Job, String> {
    Ok(mc::Job { id: number(id)?, dir: PathBuf::from(dir) })
}

fn number(id: &str) -> Result<u32, String> {
    id.parse().map_err(|_| format!("not a job id: {id:?}"))
}

fn stdin() -> String {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).expect("stdin");
    s
}

fn print_json(v: &serde_json::Value) {
    println!("{v}");
}

/// A command's output and exit status, as this command's.
fn passed_on(o: Output) -> ExitCode {
    let _ = std::io::stdout().write_all(&o.stdout);
    let _ = std::io::stderr().write_all(&o.stderr);
    match o.status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}
