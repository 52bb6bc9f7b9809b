//! `syndeo status | wait | env | exec | logs`: for users of a syndeo job.
//! In a job step (SYNDEO_JOB_DIR set) they ask this node's agent. In a shell
//! of the job outside its steps (the one `salloc --syndeo` opens), they run
//! themselves as a one-task step on the job's first node (`srun --overlap`),
//! which does not wait for the cluster. `logs --job N` reads the logs a
//! finished job left in its work directory. Readable output by default,
//! `--json` for scripts.
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use syndeo_protocol::client::Client;
use syndeo_protocol::env::{JOB_DIR, NO_WAIT, OPTION_VARS};
use syndeo_protocol::layout::JobDir;
use syndeo_protocol::local::{Op, StatusReply, WaitReply};

/// Where the job's agent can be asked.
enum Place {
    /// In a step: this node's job dir.
    Step(JobDir),
    /// In the job's shell outside its steps (salloc's): job id and first node.
    Shell { job: String, node: String },
}

fn place() -> Result<Place> {
    if let Some(dir) = std::env::var_os(JOB_DIR) {
        return Ok(Place::Step(JobDir::at(dir)));
    }
    let Ok(job) = std::env::var("SLURM_JOB_ID") else {
        bail!("not inside a Slurm job: run this in a job started with --syndeo (sbatch, salloc or srun --syndeo=IMAGE)")
    };
    let list = std::env::var("SLURM_JOB_NODELIST").or_else(|_| std::env::var("SLURM_NODELIST")).unwrap_or_default();
    let node = crate::hostlist::expand(&list).ok().and_then(|n| n.into_iter().next());
    let node = node.with_context(|| format!("job {job}: SLURM_JOB_NODELIST does not name its nodes"))?;
    Ok(Place::Shell { job, node })
}

/// Runs `syndeo ARGS` as a one-task step of `job` on `node` (it replaces
/// this process). The step does not wait for the cluster (`NO_WAIT`), and
/// `--syndeo` left in this shell's environment is not passed on.
fn relay(job: &str, node: &str, args: &[&str]) -> anyhow::Error {
    let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("syndeo"));
    let mut cmd = std::process::Command::new("srun");
    cmd.args(["--overlap", "--jobid", job, "-N1", "-n1", "-w", node, "--quiet"]).arg(me).args(args).env(NO_WAIT, "1");
    for v in OPTION_VARS {
        cmd.env_remove(v);
    }
    anyhow::anyhow!("cannot run srun: {}", cmd.exec())
}

pub fn status(as_json: bool) -> Result<()> {
    let dir = match place()? {
        Place::Step(dir) => dir,
        Place::Shell { job, node } => {
            return Err(relay(&job, &node, if as_json { &["status", "--json"] } else { &["status"] }))
        }
    };
    let s = Client::new(&dir).status(Duration::from_secs(10))?;
    if as_json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    print!("{}", status_text(&s, std::env::var("SLURM_SUBMIT_HOST").ok().as_deref()));
    Ok(())
}

fn status_text(s: &StatusReply, login: Option<&str>) -> String {
    let detail = if s.detail.is_empty() { String::new() } else { format!(" ({})", s.detail) };
    let mut t = format!("job {} on {}: {}{detail}\n", s.job, s.node, s.state);
    t += &format!("head:        {}\n", s.head);
    t += &format!("ray address: {}\n", s.ray_address);
    if !s.ray_version.is_empty() {
        t += &format!("ray:         {} (Python {})\n", s.ray_version, s.python_version);
    }
    t += &format!("nodes:       {}\n", s.nodes.join(","));
    t += &format!("joined:      {}\n", s.ready_nodes.join(","));
    if let Some(hostport) = s.dashboard_url.strip_prefix("http://") {
        let port = hostport.rsplit(':').next().unwrap_or("8265");
        let login = login.unwrap_or("LOGIN-NODE");
        t += &format!("dashboard:   {}\n", s.dashboard_url);
        t += &format!("  from your laptop: ssh -N -L {port}:{hostport} {login}   then open http://localhost:{port}\n");
    } else if !s.dashboard_note.is_empty() {
        t += &format!("dashboard:   none: {}\n", s.dashboard_note);
    }
    t
}

pub fn wait(timeout: u64) -> Result<()> {
    let dir = match place()? {
        Place::Step(dir) => dir,
        Place::Shell { job, node } => return Err(relay(&job, &node, &["wait", "--timeout", &timeout.to_string()])),
    };
    match Client::new(&dir).ask(Op::Wait { timeout_secs: timeout }, Duration::from_secs(timeout))? {
        WaitReply::Ready { .. } => {
            println!("ready");
            Ok(())
        }
        WaitReply::Failed { error } => bail!("the cluster failed: {error}"),
        WaitReply::Starting { detail } => bail!("not ready after {timeout} s: {detail}"),
    }
}

/// `export NAME='value'` lines for the cluster's variables (RAY_ADDRESS, the
/// token, ...), once it is ready: `eval "$(syndeo env)"`.
pub fn env(timeout: u64) -> Result<()> {
    let dir = match place()? {
        Place::Step(dir) => dir,
        Place::Shell { job, node } => return Err(relay(&job, &node, &["env", "--timeout", &timeout.to_string()])),
    };
    match Client::new(&dir).ask(Op::Wait { timeout_secs: timeout }, Duration::from_secs(timeout))? {
        WaitReply::Ready { env } => {
            for (k, v) in env.iter().filter(|(k, _)| *k != "PYTHONPATH") {
                println!("export {k}={}", shell_quote(v));
            }
            Ok(())
        }
        WaitReply::Failed { error } => bail!("the cluster failed: {error}"),
        WaitReply::Starting { detail } => bail!("not ready after {timeout} s: {detail}"),
    }
}

fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

/// Runs `argv` in the job's image on this node (as `srun --syndeo` does).
pub fn exec(argv: &[OsString]) -> Result<()> {
    if argv.is_empty() {
        bail!("syndeo exec needs a command, e.g. syndeo exec python3 driver.py");
    }
    match place()? {
        Place::Step(dir) => Err(crate::exec::exec_in_image(&dir, argv)),
        Place::Shell { .. } => bail!("syndeo exec runs in a job step; from this shell use: srun --syndeo CMD"),
    }
}

/// The agent and Ray logs of this node, or of `node` (through a one-task
/// step there); with `job`, the logs that finished job left in its work
/// directory.
pub fn logs(node: Option<&str>, job: Option<u32>) -> Result<()> {
    if let Some(job) = job {
        return saved_logs(job, node);
    }
    let dir = match (place()?, node) {
        (Place::Step(dir), None) => dir,
        (Place::Shell { job, node: first }, node) => return Err(relay(&job, node.unwrap_or(&first), &["logs"])),
        (Place::Step(_), Some(node)) => {
            let job = std::env::var("SLURM_JOB_ID").context("SLURM_JOB_ID is not set: run this inside the job")?;
            return Err(relay(&job, node, &["logs"]));
        }
    };
    for p in [dir.agent_log(), dir.ray_log()] {
        println!("==> {} <==", p.display());
        print!("{}", std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({e})\n")));
    }
    Ok(())
}

/// `syndeo-<job>/` of a finished job: in this directory, the home
/// directory, or the job's work directory as Slurm still knows it.
fn saved_logs(job: u32, node: Option<&str>) -> Result<()> {
    let name = format!("syndeo-{job}");
    let mut candidates = vec![PathBuf::from(&name)];
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(&name));
    }
    if let Some(workdir) = slurm_workdir(job) {
        candidates.push(workdir.join(&name));
    }
    let Some(dir) = candidates.iter().find(|d| d.is_dir()) else {
        bail!(
            "no logs of job {job} found ({name}/ in this directory, your home, or the job's work directory); \
             the site may keep no logs (keep_logs = false in syndeo.toml)"
        )
    };
    let mut nodes: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    nodes.sort();
    if let Some(n) = node {
        if !nodes.iter().any(|x| x == n) {
            bail!("{} has no logs of node {n}; it has: {}", dir.display(), nodes.join(", "));
        }
        nodes = vec![n.to_string()];
    }
    for n in &nodes {
        for f in ["agent.log", "ray.log"] {
            let p = dir.join(n).join(f);
            println!("==> {} <==", p.display());
            print!("{}", std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({e})\n")));
        }
        let ray = dir.join(n).join("ray");
        if ray.is_dir() {
            println!("(Ray's own logs of {n}: {})", ray.display());
        }
    }
    Ok(())
}

/// The job's work directory while Slurm still remembers the job.
fn slurm_workdir(job: u32) -> Option<PathBuf> {
    let o = std::process::Command::new("scontrol").args(["show", "job", &job.to_string()]).output().ok()?;
    let text = String::from_utf8_lossy(&o.stdout);
    text.split_whitespace().find_map(|kv| kv.strip_prefix("WorkDir=")).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("10.0.0.1:6379"), "'10.0.0.1:6379'");
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }

    #[test]
    fn status_shows_the_dashboard_and_a_ready_to_paste_tunnel_through_the_login_node() {
        let s = StatusReply {
            job: 7,
            node: "node1".into(),
            state: "ready".into(),
            dashboard_url: "http://10.1.2.3:41234".into(),
            ray_version: "2.60.0".into(),
            python_version: "3.11.2".into(),
            ..Default::default()
        };
        let t = status_text(&s, Some("login1"));
        assert!(t.contains("dashboard:   http://10.1.2.3:41234"), "{t}");
        assert!(t.contains("ssh -N -L 41234:10.1.2.3:41234 login1") && t.contains("http://localhost:41234"), "{t}");
        assert!(t.contains("ray:         2.60.0 (Python 3.11.2)"), "{t}");
        assert!(!status_text(&StatusReply::default(), None).contains("ssh"));
    }

    #[test]
    fn status_says_why_there_is_no_dashboard() {
        let s = StatusReply { dashboard_note: "image /i's Ray has no dashboard".into(), ..Default::default() };
        let t = status_text(&s, Some("login1"));
        assert!(t.contains("dashboard:   none: image /i's Ray has no dashboard") && !t.contains("ssh"), "{t}");
    }

    #[test]
    fn saved_logs_of_an_unknown_job_say_where_they_were_looked_for() {
        let e = saved_logs(999_999_999, None).unwrap_err().to_string();
        assert!(e.contains("syndeo-999999999/") && e.contains("keep_logs"), "{e}");
    }
}
