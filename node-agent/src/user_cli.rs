//! `syndeo status | wait | exec | logs`: for users inside a syndeo job (the
//! job's steps have SYNDEO_JOB_DIR set). Readable output by default, `--json`
//! for scripts.
use std::time::Duration;

use anyhow::{bail, Context, Result};
use syndeo_protocol::client::Client;
use syndeo_protocol::env::JOB_DIR;
use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::{Op, WaitReply};

fn job_dir() -> Result<JobDir> {
    std::env::var_os(JOB_DIR)
        .map(JobDir::at)
        .with_context(|| format!("{JOB_DIR} is not set: run this inside a job started with --syndeo"))
}

pub fn status(as_json: bool) -> Result<()> {
    let s = Client::new(&job_dir()?).status(Duration::from_secs(10))?;
    if as_json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    let detail = if s.detail.is_empty() { String::new() } else { format!(" ({})", s.detail) };
    println!("job {} on {}: {}{detail}", s.job, s.node, s.state);
    println!("head:        {}", s.head);
    println!("ray address: {}", s.ray_address);
    println!("nodes:       {}", s.nodes.join(","));
    println!("joined:      {}", s.ready_nodes.join(","));
    if !s.dashboard_url.is_empty() {
        println!("dashboard:   {}", s.dashboard_url);
    }
    Ok(())
}

pub fn wait(timeout: u64) -> Result<()> {
    let op = Op::Wait { timeout_secs: timeout };
    match Client::new(&job_dir()?).ask(op, Duration::from_secs(timeout))? {
        WaitReply::Ready { .. } => {
            println!("ready");
            Ok(())
        }
        WaitReply::Failed { error } => bail!("the cluster failed: {error}"),
        WaitReply::Starting { detail } => bail!("not ready after {timeout} s: {detail}"),
    }
}

/// Runs `argv` in the job's image on this node (as `srun --syndeo` does).
pub fn exec(argv: &[std::ffi::OsString]) -> Result<()> {
    if argv.is_empty() {
        bail!("syndeo exec needs a command, e.g. syndeo exec python3 driver.py");
    }
    Err(crate::exec::exec_in_image(&job_dir()?, argv))
}

/// This node's agent and Ray logs for the job; with `node`, that node's,
/// through a one-task step that overlaps the job's others.
pub fn logs(node: Option<&str>) -> Result<()> {
    if let Some(node) = node {
        let job = std::env::var("SLURM_JOB_ID").context("SLURM_JOB_ID is not set: run this inside the job")?;
        let me = std::env::current_exe().context("locating syndeo")?;
        use std::os::unix::process::CommandExt;
        let err = std::process::Command::new("srun")
            .args(["--overlap", "--jobid", &job, "-N1", "-n1", "-w", node, "--quiet"])
            .arg(me)
            .arg("logs")
            .exec();
        bail!("cannot run srun: {err}");
    }
    let dir = job_dir()?;
    for p in [dir.agent_log(), dir.ray_log()] {
        println!("==> {} <==", p.display());
        print!("{}", std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({e})\n")));
    }
    Ok(())
}
