//! Job steps (`S_CTX_REMOTE`, in slurmstepd). `user_init` runs once per step
//! and node with the user's identity: it waits until the node's agent reports
//! the cluster ready (or failed) and exports `RAY_ADDRESS` and `SYNDEO_*`.
//! `task_init` runs in each task just before exec: for `srun --syndeo CMD` it
//! routes the task through `syndeo-agent`'s exec wrapper, which runs CMD in
//! the job's image.
use syndeo_protocol::env;
use syndeo_protocol::local::WaitReply;

use crate::hooks::config;
use crate::node::Node;
use crate::spank::{Context, Spank, BATCH_STEP, EXTERN_STEP, INTERACTIVE_STEP};
use crate::{HookError, HookResult};

pub fn user_init(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::Remote {
        return Ok(());
    }
    let cfg = config(sp)?;
    let job = sp.job_id()?;
    let step = sp.step_id().unwrap_or(0);
    if step == EXTERN_STEP {
        return Ok(());
    }
    let dir = cfg.job_dir(job);
    if !node.exists(dir.path()) {
        return Ok(()); // no syndeo cluster for this job on this node
    }
    if step == BATCH_STEP {
        for name in env::OPTION_VARS {
            let _ = sp.unsetenv(name);
        }
    }
    if sp.getenv(env::NO_WAIT)?.is_some() {
        // syndeo's own status/logs step: it reports on the cluster as it is.
        return Ok(sp.setenv(env::JOB_DIR, &dir.path().to_string_lossy())?);
    }
    sp.log_verbose(&format!("syndeo: job {job} step {step:#x}: waiting for the Ray cluster"));
    let failure = match node.wait_ready(&dir, cfg.wait_timeout) {
        Ok(WaitReply::Ready { env }) => {
            for (k, v) in env {
                let v = match (k.as_str(), sp.getenv("PYTHONPATH")?) {
                    // syndeo's driver hook goes first; the step's own paths stay.
                    ("PYTHONPATH", Some(own)) if !own.is_empty() => format!("{v}:{own}"),
                    _ => v,
                };
                sp.setenv(&k, &v)?;
            }
            return Ok(());
        }
        Ok(WaitReply::Failed { error }) => format!("the Ray cluster of job {job} could not start: {error}"),
        Ok(WaitReply::Starting { detail }) => {
            format!("the Ray cluster of job {job} was not ready after {} s ({detail})", cfg.wait_timeout.as_secs())
        }
        Err(e) => format!("job {job}: {e}"),
    };
    // Failing this hook would make Slurm drain the node ("batch job complete
    // failure"): a user's mistake must not. The step's tasks instead run the
    // wrapper, which prints the cause on the job's stderr and exits 1.
    sp.log_error(&format!("syndeo: {failure}"));
    Ok(sp.setenv(env::EXEC_ERROR, &failure)?)
}

pub fn task_init(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::Remote {
        return Ok(());
    }
    if sp.getenv(env::EXEC_ERROR)?.is_some() {
        let cfg = config(sp)?;
        let original = sp.replace_task_program(&cfg.agent.to_string_lossy())?;
        return Ok(sp.setenv(env::EXEC_ARGV0, &original)?);
    }
    if sp.option_value().is_none() {
        return Ok(());
    }
    let step = sp.step_id().unwrap_or(0);
    if matches!(step, BATCH_STEP | EXTERN_STEP | INTERACTIVE_STEP) {
        return Ok(()); // the batch script itself runs on the host, with RAY_ADDRESS set
    }
    let cfg = config(sp)?;
    let job = sp.job_id()?;
    let dir = cfg.job_dir(job);
    if !node.exists(dir.path()) {
        return Err(HookError(format!(
            "syndeo: srun --syndeo: job {job} has no syndeo cluster on this node; \
             submit the job itself with --syndeo (sbatch/salloc --syndeo=IMAGE)"
        )));
    }
    let original = sp.replace_task_program(&cfg.agent.to_string_lossy())?;
    sp.setenv(env::EXEC_ARGV0, &original)?;
    Ok(sp.setenv(env::EXEC_JOB_DIR, &dir.path().to_string_lossy())?)
}
