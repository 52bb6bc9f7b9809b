//! Prolog and epilog (`S_CTX_JOB_SCRIPT`, root, every allocated node). The
//! plugin only decides whether the job is a syndeo job and runs
//! `syndeo-agent prolog|start|epilog`, a root-owned binary that does the
//! work. No shell is involved and the child gets a clean environment.
//!
//! The prolog prepares the node; the agent is started (`start`) where
//! `launch.rs` says: from the job's extern step when Slurm has one, else
//! right here. The plugin sends the prolog the job's nodes' addresses, which
//! only Slurm's own configuration knows.
//!
//! Exit status of the agent (`syndeo_protocol::exit`): 0 done (user errors
//! are reported to the job through the agent, never by failing the prolog: a
//! failed prolog drains the node); NOT_CLEAN from the epilog: it named what
//! it could not remove, and the node stays in service; anything else is a
//! node fault, and the hook fails.
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use syndeo_protocol::env::{JOB_SCRIPT_ENV, REQUEST_RECORD};
use syndeo_protocol::exit;

use crate::child::{self, RunError};
use crate::config::PluginConfig;
use crate::ffi::{adopt_into_extern_step, log_error, log_info, node_addresses, running_conf, Context, Spank};
use crate::hooks::config;
use crate::launch::{launch, propagated, Launch};
use crate::{HookError, HookResult};

const PROLOG_LIMIT: Duration = Duration::from_secs(60);
const START_LIMIT: Duration = Duration::from_secs(30);
const EPILOG_LIMIT: Duration = Duration::from_secs(150);

pub fn prolog(sp: &Spank) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let Some(image) = requested(sp) else {
        return Ok(()); // not a syndeo job
    };
    let cfg = config(sp)?;
    let (job, uid, gid) = (sp.job_id()?, sp.uid()?, sp.gid()?);
    let conf = running_conf();
    let mut cmd = agent_command(&cfg, "prolog", job, uid);
    cmd.arg(format!("--gid={gid}")).arg(format!("--propagate={}", propagated(&conf).join(",")));
    if let Some(image) = image {
        // One argument, whatever the value: the agent checks it again.
        cmd.arg(format!("--image={image}"));
    }
    let how = launch(&conf);
    log_info(&format!("syndeo: prolog for job {job}: preparing the node (the agent starts {how:?})"));
    run_with_input(cmd, &addresses_json(), PROLOG_LIMIT, "prolog")?;
    match how {
        Launch::ExternStep => Ok(()),
        Launch::PrologAdopted => start_agent(&cfg, job, uid, true),
        Launch::Prolog => start_agent(&cfg, job, uid, false),
    }
}

/// Whether the job asked for a cluster, and with which image (None inside:
/// the site's default): Slurm's record of the option (jobs made by `srun
/// --syndeo`), or syndeo's own (sbatch, salloc; see `REQUEST_RECORD`).
fn requested(sp: &Spank) -> Option<Option<String>> {
    if let Some(v) = sp.option_value() {
        return Some(v);
    }
    match std::env::var(format!("SPANK_{REQUEST_RECORD}")).ok()?.as_str() {
        "" => None,
        "-" => Some(None),
        image => Some(Some(image.to_string())),
    }
}

/// Whether the prolog prepared job `job` on this node: root's state
/// directory for it exists (nothing the user can make).
pub fn prepared(cfg: &PluginConfig, job: u32) -> bool {
    cfg.runtime_base.join(".jobs").join(job.to_string()).join("spec.json").exists()
}

/// `syndeo-agent start` for a prepared job. With `adopt`, the helper waits
/// until the plugin has added it to the job's extern step, so that all it
/// starts lives in the job's cgroups.
pub fn start_agent(cfg: &PluginConfig, job: u32, uid: u32, adopt: bool) -> HookResult {
    let mut cmd = agent_command(cfg, "start", job, uid);
    cmd.arg("--hold").stdin(Stdio::piped());
    if adopt {
        cmd.stdout(Stdio::piped());
    }
    let started = Instant::now();
    let mut helper = cmd.spawn().map_err(|e| spawn_error("start", &cfg.agent.to_string_lossy(), e))?;
    if adopt {
        match adopt_into_extern_step(job, helper.id() as i32) {
            Ok(()) => log_info(&format!("syndeo: job {job}: the node agent starts in the job's extern step")),
            Err(e) => {
                log_error(&format!("syndeo: job {job}: {e}; its cluster on this node runs outside the job's cgroups"))
            }
        }
    }
    // Kept open until the supervisor is accounted: the helper waits for its end.
    let go = helper.stdin.take().map(|mut go| {
        let _ = go.write_all(b"go\n");
        go
    });
    if let Some(said) = helper.stdout.take().map(supervisor_line) {
        if let Ok(Some(pid)) = said.recv_timeout(START_LIMIT) {
            account_supervisor(job, &mut helper, pid);
        }
    }
    drop(go);
    let left = START_LIMIT.saturating_sub(started.elapsed()).max(Duration::from_secs(1));
    finish(helper, left, "start", &cfg.agent.to_string_lossy())?;
    Ok(())
}

/// The supervisor's PID, from the helper's `supervisor PID` line, read in a
/// thread (it ends when the helper closes its stdout, at its end at the
/// latest), so the hook waits for it with a timeout.
fn supervisor_line(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<Option<i32>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        let _ = tx.send(line.strip_prefix("supervisor ").and_then(|p| p.trim().parse::<i32>().ok()));
    });
    rx
}

/// Slurm's accounting of the step counts the processes below a PID it is
/// given: the supervisor's, under which the agent and Ray run. The helper,
/// its parent, never reaps it and is still running (it waits for its stdin
/// to close), so the PID cannot name another process that reused it.
fn account_supervisor(job: u32, helper: &mut std::process::Child, pid: i32) {
    if !matches!(helper.try_wait(), Ok(None)) {
        return log_error(&format!("syndeo: job {job}: the start helper ended early; supervisor {pid} not accounted"));
    }
    if let Err(e) = adopt_into_extern_step(job, pid) {
        log_error(&format!("syndeo: job {job}: accounting the supervisor ({pid}): {e}"));
    }
    if !matches!(helper.try_wait(), Ok(None)) {
        log_error(&format!("syndeo: job {job}: the start helper ended while process {pid} was accounted"));
    }
}

/// `{"node": "addr", ...}` for the job's nodes, from Slurm's configuration.
fn addresses_json() -> String {
    let list = std::env::var("SLURM_JOB_NODELIST").or_else(|_| std::env::var("SLURM_NODELIST")).unwrap_or_default();
    let mut out = String::from("{");
    for (i, (node, addr)) in node_addresses(&list).into_iter().filter_map(|(n, a)| Some((n, a?))).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{}:{}", json_string(&node), json_string(&addr)));
    }
    out.push('}');
    out
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn epilog(sp: &Spank) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    // The option is the usual sign; the job directory catches a job whose
    // option did not reach the epilog, so nothing of it is ever left behind.
    if requested(sp).is_none() && !cfg.job_dir(job).path().exists() {
        return Ok(());
    }
    log_info(&format!("syndeo: epilog for job {job}: stopping the cluster and cleaning up"));
    let start = Instant::now();
    let cmd = agent_command(&cfg, "epilog", job, uid);
    let agent = cfg.agent.to_string_lossy().into_owned();
    let spawned = child_of(cmd, "epilog", &agent)?;
    match finish(spawned, EPILOG_LIMIT, "epilog", &agent)? {
        Outcome::Done => {
            log_info(&format!("syndeo: epilog for job {job}: node clean in {} ms", start.elapsed().as_millis()))
        }
        Outcome::NotClean => log_info(&format!(
            "syndeo: epilog for job {job}: the node is not clean: the paths above remain; it stays in service"
        )),
    }
    Ok(())
}

/// How a root-side command that did its job ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done,
    /// The epilog could not remove everything (it named each path).
    NotClean,
}

fn agent_command(cfg: &PluginConfig, verb: &str, job: u32, uid: u32) -> Command {
    let mut cmd = Command::new(&cfg.agent);
    cmd.arg(verb)
        .arg(format!("--job={job}"))
        .arg(format!("--uid={uid}"))
        .arg("--config")
        .arg(&cfg.config)
        .arg("--runtime-base")
        .arg(&cfg.runtime_base)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for name in JOB_SCRIPT_ENV {
        if let Ok(v) = std::env::var(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

fn spawn_error(what: &str, agent: &str, e: std::io::Error) -> HookError {
    HookError(format!("syndeo: {what}: cannot run {agent}: {e} (is syndeo installed on this node?)"))
}

fn child_of(mut cmd: Command, what: &str, agent: &str) -> Result<std::process::Child, HookError> {
    cmd.spawn().map_err(|e| spawn_error(what, agent, e))
}

/// Runs the agent with `input` on its stdin, to completion within `limit`.
fn run_with_input(mut cmd: Command, input: &str, limit: Duration, what: &str) -> HookResult {
    let agent = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::piped());
    let mut spawned = child_of(cmd, what, &agent)?;
    if let Some(mut stdin) = spawned.stdin.take() {
        // An agent that stopped early does not read it: its status says why.
        let _ = stdin.write_all(input.as_bytes());
    }
    finish(spawned, limit, what, &agent).map(|_| ())
}

/// Waits for the agent within `limit`; its stderr goes to slurmd's log.
fn finish(spawned: std::process::Child, limit: Duration, what: &str, agent: &str) -> Result<Outcome, HookError> {
    let done = child::finish(spawned, limit).map_err(|e| match e {
        RunError::Spawn(e) => spawn_error(what, agent, e),
        RunError::TimedOut(l) => HookError(format!("syndeo: {what}: {agent} did not finish within {l:?}; killed it")),
        RunError::Wait(e) => HookError(format!("syndeo: {what}: waiting for {agent}: {e}")),
    })?;
    for line in done.stderr.lines().filter(|l| !l.trim().is_empty()) {
        log_info(&format!("syndeo: {what}: {line}"));
    }
    match done.status.code() {
        Some(exit::OK) => Ok(Outcome::Done),
        Some(exit::NOT_CLEAN) if what == "epilog" => Ok(Outcome::NotClean),
        _ => Err(HookError(format!("syndeo: {what} failed on this node ({}); see the lines above", done.status))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper(script: &str) -> std::process::Child {
        Command::new("/bin/sh").args(["-c", script]).stdout(Stdio::piped()).spawn().unwrap()
    }

    #[test]
    fn the_supervisor_pid_is_read_from_the_helper_with_a_timeout() {
        let mut h = helper("echo supervisor 4242; sleep 1");
        let said = supervisor_line(h.stdout.take().unwrap());
        assert_eq!(said.recv_timeout(Duration::from_secs(5)), Ok(Some(4242)));
        h.wait().unwrap();
        let mut h = helper("exit 0");
        assert_eq!(supervisor_line(h.stdout.take().unwrap()).recv_timeout(Duration::from_secs(5)), Ok(None));
        h.wait().unwrap();
        let mut h = helper("sleep 3");
        let t = Instant::now();
        assert!(supervisor_line(h.stdout.take().unwrap()).recv_timeout(Duration::from_millis(200)).is_err());
        assert!(t.elapsed() < Duration::from_secs(2));
        h.wait().unwrap();
    }
}
