//! `syndeo-agent prolog` (root, from the SPANK prolog on every node of a
//! syndeo job): makes the job's directories, writes the job spec and the
//! job's secrets, drops to the job user and starts the node agent's
//! supervisor detached.
//! It returns as soon as the agent listens; it never waits for Ray.
//!
//! Errors returned from here are node faults: the node is drained with a
//! reason that names the fault, and the plugin fails the prolog (Slurm
//! requeues the job). A user's mistake, such as a bad image, is not detected
//! here at all: the agent finds it as the user and the job's steps report it.
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

use crate::cli::PrologArgs;
use crate::config::Config;
use syndeo_protocol::env::JOB_MARKER;
use syndeo_protocol::layout::JobDir;

use crate::job::{JobSpec, SECRET_FILE, SPEC_FILE};
use crate::root::dirs::{ensure_root_base, make_filled_job_dir, make_job_dir};
use crate::root::drain;
use crate::root::privdrop::{drop_to, Identity};
use crate::root::procs;
use crate::{alloc, hostlist, secret};

/// Directory under the runtime base where root records each job's agent.
pub const AGENTS_DIR: &str = ".agents";

pub fn run(a: &PrologArgs) -> Result<()> {
    let result = set_up(a);
    if let Err(e) = &result {
        let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
        if !node.is_empty() {
            drain::drain(&node, &format!("node fault in the prolog of job {}: {e:#}", a.common.job));
        }
    }
    result
}

fn set_up(a: &PrologArgs) -> Result<()> {
    mark_inherited_fds_cloexec();
    let id = Identity::lookup(a.common.uid, a.gid)?;
    let config = match Config::load(&a.common.config) {
        Ok(c) => c,
        // A broken site config must not drain every node it reaches: syndeo
        // jobs fail with the reason, other jobs run on.
        Err(e) => {
            return fail_job(a, &id, &format!("syndeo's site configuration is invalid, ask the admins to fix it: {e}"))
        }
    };
    let spec = job_spec(a, &id, config)?;

    let base = ensure_root_base(&a.common.runtime_base, 0o755)?;
    let agents = ensure_agents_dir(&a.common.runtime_base)?;
    let name = a.common.job.to_string();
    for parent in [&spec.config.temp_base, &spec.config.shm_base] {
        let dir = ensure_root_base(parent, 0o755)?;
        make_job_dir(&dir, parent, &name, id.uid, id.gid)?;
    }
    write_job_dir(&base, &a.common.runtime_base, &spec)?;

    let mut record = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(agents.join(&name))
        .context("recording the agent")?;
    let exe = std::env::current_exe().context("locating syndeo-agent")?;

    drop_to(&id)?;
    let home = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id.uid))?
        .map(|u| u.dir)
        .unwrap_or_else(|| spec.workdir.clone());
    let mut child = Command::new(&exe)
        .arg0("syndeo-agent")
        .arg("supervise")
        .arg("--job-dir")
        .arg(&spec.job_dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("USER", &id.name)
        .env("LOGNAME", &id.name)
        .env(JOB_MARKER, &name)
        .current_dir(&spec.job_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the node agent")?;
    let pid = child.id() as i32;
    let start_time = procs::stat(pid).map(|s| s.start_time).unwrap_or(0);
    writeln!(record, "{pid} {start_time}")?;
    drop(record);

    // Return once the agent listens, so a job step never races its socket.
    let socket = spec.dir().socket();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if socket.exists() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!("node agent exited at start ({status}); see {}/agent.log", spec.job_dir.display());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("node agent did not open {} within 10 s", socket.display());
    Ok(())
}

/// Leaves `<job dir>/failed` (the user's, 0600) with `message` and starts no
/// agent: the job's steps print the message and fail; the node stays in
/// service. The message also goes to slurmd's log.
fn fail_job(a: &PrologArgs, id: &Identity, message: &str) -> Result<()> {
    eprintln!("{message}");
    let base = ensure_root_base(&a.common.runtime_base, 0o755)?;
    let note = JobDir::new(&a.common.runtime_base, a.common.job).failed_note();
    let note_name = note.file_name().expect("a file name").to_string_lossy().into_owned();
    let files = [(note_name.as_str(), message.to_string())];
    make_filled_job_dir(&base, &a.common.runtime_base, &a.common.job.to_string(), &files, id.uid, id.gid)
}

fn job_spec(a: &PrologArgs, id: &Identity, config: Config) -> Result<JobSpec> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let node = env("SLURMD_NODENAME").ok_or_else(|| anyhow!("SLURMD_NODENAME is not set in the prolog"))?;
    let list = env("SLURM_JOB_NODELIST")
        .or_else(|| env("SLURM_NODELIST"))
        .ok_or_else(|| anyhow!("neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set in the prolog"))?;
    let nodes = hostlist::expand(&list)?;
    let index = nodes
        .iter()
        .position(|n| *n == node)
        .ok_or_else(|| anyhow!("this node ({node}) is not in the job's node list {list}"))?;
    let cpus = env("SLURM_JOB_CPUS_PER_NODE")
        .map(|s| alloc::cpus_per_node(&s))
        .transpose()?
        .and_then(|v| v.get(index).copied())
        .unwrap_or(1);
    let gpus = alloc::gpu_ids(env("SLURM_JOB_GPUS").or_else(|| env("CUDA_VISIBLE_DEVICES")).as_deref());
    let workdir = env("SLURM_JOB_WORK_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    let job = a.common.job.to_string();
    Ok(JobSpec {
        job_id: a.common.job,
        uid: id.uid,
        gid: id.gid,
        user: id.name.clone(),
        node,
        nodes,
        index,
        cpus,
        gpus,
        image: a.image.clone(),
        workdir,
        job_dir: a.common.runtime_base.join(&job),
        temp_dir: config.temp_base.join(&job),
        shm_dir: config.shm_base.join(&job),
        config,
    })
}

fn ensure_agents_dir(base: &Path) -> Result<PathBuf> {
    let p = base.join(AGENTS_DIR);
    ensure_root_base(&p, 0o700)?;
    Ok(p)
}

/// The job directory: the job's description and its mesh secret.
fn write_job_dir(base: &File, base_path: &Path, spec: &JobSpec) -> Result<()> {
    let key = std::fs::read_to_string(&spec.config.site_key).with_context(|| {
        format!("reading the site key {} (run `syndeo-agent keygen`)", spec.config.site_key.display())
    })?;
    let job_secret = secret::job_secret(key.trim().as_bytes(), spec.job_id, spec.uid);
    let files = [(SPEC_FILE, serde_json::to_string_pretty(spec)?), (SECRET_FILE, job_secret)];
    make_filled_job_dir(base, base_path, &spec.job_id.to_string(), &files, spec.uid, spec.gid)
}

/// Slurm's descriptors must not reach the user's processes.
fn mark_inherited_fds_cloexec() {
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&fd| fd > 2).collect();
    for fd in fds {
        let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    }
}
