//! Prolog and epilog (`S_CTX_JOB_SCRIPT`, root, every allocated node). The
//! plugin only decides whether the job is a syndeo job and runs
//! `syndeo-agent prolog|epilog`, a root-owned binary that does the work.
//! No shell is involved and the child gets a clean environment.
//!
//! Exit status of the agent: 0 done (user errors are reported to the job
//! through the agent, never by failing the prolog: a failed prolog drains the
//! node); anything else is a node fault, and the hook fails.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{self, RunError};
use crate::config::PluginConfig;
use crate::ffi::{log_info, Context, Spank};
use crate::hooks::config;
use crate::{HookError, HookResult};

/// Environment the agent needs from the prolog's, by name.
const PASS_ENV: &[&str] = &[
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURMD_NODENAME",
    "SLURM_JOB_USER",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_JOB_WORK_DIR",
    "SLURM_JOB_GPUS",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_PARTITION",
];

const PROLOG_LIMIT: Duration = Duration::from_secs(60);
const EPILOG_LIMIT: Duration = Duration::from_secs(120);

pub fn prolog(sp: &Spank) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let Some(image) = sp.option_value() else {
        return Ok(()); // not a syndeo job
    };
    let cfg = config(sp)?;
    let (job, uid, gid) = (sp.job_id()?, sp.uid()?, sp.gid()?);
    let mut cmd = agent_command(&cfg, "prolog", job, uid);
    cmd.arg(format!("--gid={gid}"));
    if let Some(image) = image {
        // One argument, whatever the value: the agent checks it again.
        cmd.arg(format!("--image={image}"));
    }
    log_info(&format!("syndeo: prolog for job {job}: starting the node agent"));
    run(cmd, PROLOG_LIMIT, "prolog")
}

pub fn epilog(sp: &Spank) -> HookResult {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    // The option is the usual sign; the job directory catches a job whose
    // option did not reach the epilog, so nothing of it is ever left behind.
    if sp.option_value().is_none() && !cfg.job_dir(job).path().exists() {
        return Ok(());
    }
    log_info(&format!("syndeo: epilog for job {job}: stopping the cluster and cleaning up"));
    let start = Instant::now();
    run(agent_command(&cfg, "epilog", job, uid), EPILOG_LIMIT, "epilog")?;
    log_info(&format!("syndeo: epilog for job {job}: node clean in {} ms", start.elapsed().as_millis()));
    Ok(())
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
    for name in PASS_ENV {
        if let Ok(v) = std::env::var(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

/// Runs the agent to completion within `limit`; its stderr goes to slurmd's log.
fn run(cmd: Command, limit: Duration, what: &str) -> HookResult {
    let agent = cmd.get_program().to_string_lossy().into_owned();
    let done = child::run(cmd, limit).map_err(|e| match e {
        RunError::Spawn(e) => {
            HookError(format!("syndeo: {what}: cannot run {agent}: {e} (is syndeo installed on this node?)"))
        }
        RunError::TimedOut(l) => HookError(format!("syndeo: {what}: {agent} did not finish within {l:?}; killed it")),
        RunError::Wait(e) => HookError(format!("syndeo: {what}: waiting for {agent}: {e}")),
    })?;
    for line in done.stderr.lines().filter(|l| !l.trim().is_empty()) {
        log_info(&format!("syndeo: {what}: {line}"));
    }
    if done.status.success() {
        Ok(())
    } else {
        Err(HookError(format!("syndeo: {what} failed on this node ({}); see the lines above", done.status)))
    }
}
