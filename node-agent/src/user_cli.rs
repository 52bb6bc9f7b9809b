//! `syndeo status | wait | exec | logs`: for users inside a syndeo job (the
//! job's steps have SYNDEO_JOB_DIR set). Readable output by default, `--json`
//! for scripts.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::job::{LOG_FILE, SOCKET_FILE};

fn job_dir() -> Result<PathBuf> {
    std::env::var_os("SYNDEO_JOB_DIR")
        .map(PathBuf::from)
        .context("SYNDEO_JOB_DIR is not set: run this inside a job started with --syndeo")
}

fn ask(req: Value, timeout: Duration) -> Result<Value> {
    crate::agent::local_request(&job_dir()?.join(SOCKET_FILE), &req, timeout)
}

pub fn status(as_json: bool) -> Result<()> {
    let s = ask(json!({"op": "status"}), Duration::from_secs(10))?;
    if as_json {
        println!("{s}");
        return Ok(());
    }
    let get =
        |k: &str| s.get(k).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).unwrap_or_default();
    println!(
        "job {} on {}: {}{}",
        get("job"),
        get("node"),
        get("state"),
        match get("detail").as_str() {
            "" => String::new(),
            d => format!(" ({d})"),
        }
    );
    println!("head:        {}", get("head"));
    println!("ray address: {}", get("ray_address"));
    println!("nodes:       {}", get("nodes"));
    println!("joined:      {}", get("ready_nodes"));
    if !get("dashboard_url").is_empty() {
        println!("dashboard:   {}", get("dashboard_url"));
    }
    Ok(())
}

pub fn wait(timeout: u64) -> Result<()> {
    let r = ask(json!({"op": "wait", "timeout_secs": timeout}), Duration::from_secs(timeout + 5))?;
    match r.get("state").and_then(|s| s.as_str()) {
        Some("ready") => {
            println!("ready");
            Ok(())
        }
        Some("failed") => bail!("the cluster failed: {}", r["error"].as_str().unwrap_or("?")),
        _ => bail!("not ready after {timeout} s: {}", r["detail"].as_str().unwrap_or("?")),
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
    for f in [LOG_FILE, "ray.log"] {
        let p = dir.join(f);
        println!("==> {} <==", p.display());
        print!("{}", std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({e})\n")));
    }
    Ok(())
}
