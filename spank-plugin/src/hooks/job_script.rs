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
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use syndeo_protocol::env::{JOB_SCRIPT_ENV, REQUEST_RECORD};
use syndeo_protocol::exit;

use crate::config::PluginConfig;
use crate::hooks::config;
use crate::launch::{launch, propagated, Launch};
use crate::node::{Finished, Node, RunError};
use crate::spank::{Context, Spank};
use crate::{HookError, HookResult};

const PROLOG_LIMIT: Duration = Duration::from_secs(60);
const START_LIMIT: Duration = Duration::from_secs(30);
const EPILOG_LIMIT: Duration = Duration::from_secs(150);

pub fn prolog(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let Some(image) = requested(sp, node) else {
        return Ok(()); // not a syndeo job
    };
    let cfg = config(sp)?;
    let (job, uid, gid) = (sp.job_id()?, sp.uid()?, sp.gid()?);
    let conf = sp.running_conf();
    let mut cmd = agent_command(node, &cfg, "prolog", job, uid);
    cmd.arg(format!("--gid={gid}")).arg(format!("--propagate={}", propagated(&conf).join(",")));
    if let Some(image) = image {
        // One argument, whatever the value: the agent checks it again.
        cmd.arg(format!("--image={image}"));
    }
    let how = launch(&conf);
    sp.log_info(&format!("syndeo: prolog for job {job}: preparing the node (the agent starts {how:?})"));
    let ran = node.run(cmd, Some(&addresses_json(sp, node)), PROLOG_LIMIT);
    finish(sp, ran, "prolog", &cfg)?;
    match how {
        Launch::ExternStep => Ok(()),
        Launch::PrologAdopted => start_agent(sp, node, &cfg, job, uid, true),
        Launch::Prolog => start_agent(sp, node, &cfg, job, uid, false),
    }
}

/// Whether the job asked for a cluster, and with which image (None inside:
/// the site's default): Slurm's record of the option (jobs made by `srun
/// --syndeo`), or syndeo's own (sbatch, salloc; see `REQUEST_RECORD`).
fn requested(sp: &dyn Spank, node: &dyn Node) -> Option<Option<String>> {
    if let Some(v) = sp.option_value() {
        return Some(v);
    }
    match node.env(&format!("SPANK_{REQUEST_RECORD}"))?.as_str() {
        "" => None,
        "-" => Some(None),
        image => Some(Some(image.to_string())),
    }
}

/// Whether the prolog prepared job `job` on this node: root's state
/// directory for it exists (nothing the user can make).
pub fn prepared(node: &dyn Node, cfg: &PluginConfig, job: u32) -> bool {
    node.exists(&cfg.runtime_base.join(".jobs").join(job.to_string()).join("spec.json"))
}

/// `syndeo-agent start` for a prepared job. With `adopt`, the helper waits
/// until the plugin has added it to the job's extern step, so that all it
/// starts lives in the job's cgroups.
pub fn start_agent(sp: &dyn Spank, node: &dyn Node, cfg: &PluginConfig, job: u32, uid: u32, adopt: bool) -> HookResult {
    let cmd = agent_command(node, cfg, "start", job, uid);
    finish(sp, node.start(cmd, job, adopt, START_LIMIT), "start", cfg).map(|_| ())
}

/// `{"node": "addr", ...}` for the job's nodes, from Slurm's configuration.
fn addresses_json(sp: &dyn Spank, node: &dyn Node) -> String {
    let list = node.env("SLURM_JOB_NODELIST").or_else(|| node.env("SLURM_NODELIST")).unwrap_or_default();
    let mut out = String::from("{");
    for (i, (name, addr)) in sp.node_addresses(&list).into_iter().filter_map(|(n, a)| Some((n, a?))).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{}:{}", json_string(&name), json_string(&addr)));
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

pub fn epilog(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    // The option is the usual sign; the job directory catches a job whose
    // option did not reach the epilog, so nothing of it is ever left behind.
    if requested(sp, node).is_none() && !node.exists(cfg.job_dir(job).path()) {
        return Ok(());
    }
    sp.log_info(&format!("syndeo: epilog for job {job}: stopping the cluster and cleaning up"));
    let start = Instant::now();
    let cmd = agent_command(node, &cfg, "epilog", job, uid);
    match finish(sp, node.run(cmd, None, EPILOG_LIMIT), "epilog", &cfg)? {
        Outcome::Done => {
            sp.log_info(&format!("syndeo: epilog for job {job}: node clean in {} ms", start.elapsed().as_millis()))
        }
        Outcome::NotClean => sp.log_info(&format!(
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

/// `syndeo-agent VERB` for job `job`: no shell, a clean environment but for
/// PATH and the job script's variables the agent reads, stderr piped.
fn agent_command(node: &dyn Node, cfg: &PluginConfig, verb: &str, job: u32, uid: u32) -> Command {
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
        if let Some(v) = node.env(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

/// What the agent's run means: its stderr goes to slurmd's log; exit 0 is
/// done, NOT_CLEAN from the epilog is a node that stays in service, and
/// anything else (or no end within the limit) fails the hook.
fn finish(
    sp: &dyn Spank,
    ran: Result<Finished, RunError>,
    what: &str,
    cfg: &PluginConfig,
) -> Result<Outcome, HookError> {
    let agent = cfg.agent.to_string_lossy();
    let done = ran.map_err(|e| match e {
        RunError::Spawn(e) => {
            HookError(format!("syndeo: {what}: cannot run {agent}: {e} (is syndeo installed on this node?)"))
        }
        RunError::TimedOut(l) => HookError(format!("syndeo: {what}: {agent} did not finish within {l:?}; killed it")),
        RunError::Wait(e) => HookError(format!("syndeo: {what}: waiting for {agent}: {e}")),
    })?;
    for line in done.stderr.lines().filter(|l| !l.trim().is_empty()) {
        sp.log_info(&format!("syndeo: {what}: {line}"));
    }
    match done.status.code() {
        Some(exit::OK) => Ok(Outcome::Done),
        Some(exit::NOT_CLEAN) if what == "epilog" => Ok(Outcome::NotClean),
        _ => Err(HookError(format!("syndeo: {what} failed on this node ({}); see the lines above", done.status))),
    }
}
