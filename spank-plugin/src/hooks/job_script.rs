//! Prolog and epilog (`S_CTX_JOB_SCRIPT`, root, every allocated node). The
//! plugin only decides whether the job is a syndeo job and runs
//! `syndeo-agent prolog|epilog`, a root-owned binary that does the work.
//! No shell is involved and the child gets a clean environment.
//!
//! Exit status of the agent: 0 done (user errors are reported to the job
//! through the agent, never by failing the prolog: a failed prolog drains the
//! node); anything else is a node fault, and the hook fails.
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::PluginConfig;
use crate::ffi::{log_error, log_info, Context, Spank};
use crate::hooks::config;

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

pub fn prolog(sp: &Spank) -> Result<(), ()> {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let Some(image) = sp.option_value() else {
        return Ok(()); // not a syndeo job
    };
    let cfg = config(sp)?;
    let (job, uid, gid) = ids(sp)?;
    let mut cmd = agent_command(&cfg, "prolog", job, uid);
    cmd.arg("--gid").arg(gid.to_string());
    if let Some(image) = image {
        cmd.arg("--image").arg(image);
    }
    log_info(&format!("syndeo: prolog for job {job}: starting the node agent"));
    run(cmd, PROLOG_LIMIT, "prolog")
}

pub fn epilog(sp: &Spank) -> Result<(), ()> {
    if sp.context() != Context::JobScript {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid, _) = ids(sp)?;
    // The option is the usual sign; the job directory catches a job whose
    // option did not reach the epilog, so nothing of it is ever left behind.
    if sp.option_value().is_none() && !cfg.job_dir(job).exists() {
        return Ok(());
    }
    log_info(&format!("syndeo: epilog for job {job}: stopping the cluster and cleaning up"));
    let start = Instant::now();
    let result = run(agent_command(&cfg, "epilog", job, uid), EPILOG_LIMIT, "epilog");
    if result.is_ok() {
        log_info(&format!("syndeo: epilog for job {job}: node clean in {} ms", start.elapsed().as_millis()));
    }
    result
}

fn ids(sp: &Spank) -> Result<(u32, u32, u32), ()> {
    let r = (|| Ok::<_, crate::ffi::SpankError>((sp.job_id()?, sp.uid()?, sp.gid()?)))();
    r.map_err(|e| log_error(&format!("syndeo: {e}")))
}

fn agent_command(cfg: &PluginConfig, verb: &str, job: u32, uid: u32) -> Command {
    let mut cmd = Command::new(&cfg.agent);
    cmd.arg(verb)
        .arg("--job")
        .arg(job.to_string())
        .arg("--uid")
        .arg(uid.to_string())
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
fn run(mut cmd: Command, limit: Duration, what: &str) -> Result<(), ()> {
    let agent = Path::new(cmd.get_program()).display().to_string();
    let mut child = cmd.spawn().map_err(|e| {
        log_error(&format!("syndeo: {what}: cannot run {agent}: {e} (is syndeo installed on this node?)"))
    })?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                log_error(&format!("syndeo: {what}: {agent} did not finish within {limit:?}; killed it"));
                return Err(());
            }
            Err(e) => {
                log_error(&format!("syndeo: {what}: waiting for {agent}: {e}"));
                return Err(());
            }
        }
    };
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    for line in err.lines().filter(|l| !l.trim().is_empty()) {
        log_info(&format!("syndeo: {what}: {line}"));
    }
    if status.success() {
        Ok(())
    } else {
        log_error(&format!("syndeo: {what} failed on this node ({status}); see the lines above"));
        Err(())
    }
}
