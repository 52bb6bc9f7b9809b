//! Job steps (`S_CTX_REMOTE`, in slurmstepd). `user_init` runs once per step
//! and node with the user's identity: it waits until the node's agent reports
//! the cluster ready (or failed) and exports `RAY_ADDRESS` and `SYNDEO_*`.
//! `task_init` runs in each task just before exec: for `srun --syndeo CMD` it
//! routes the task through `syndeo-agent`'s exec wrapper, which runs CMD in
//! the job's image.
use crate::agent_client::{wait_ready, WaitReply};
use crate::ffi::{log_error, log_verbose, Context, Spank, BATCH_STEP, EXTERN_STEP, INTERACTIVE_STEP};
use crate::hooks::config;

/// Names under which Slurm carries a SPANK option in a job's environment; a
/// batch script that kept them would pass `--syndeo` to every `srun` in it.
const OPTION_ENV: &[&str] = &[
    "SLURM_SPANK__SLURM_SPANK_OPTION_syndeo_syndeo",
    "SPANK__SLURM_SPANK_OPTION_syndeo_syndeo",
    "_SLURM_SPANK_OPTION_syndeo_syndeo",
];

/// Set for the exec wrapper: the program the task was going to run.
pub const EXEC_ARGV0_ENV: &str = "SYNDEO_EXEC_ARGV0";
/// Set for the exec wrapper when the cluster failed: print this, exit 1.
pub const EXEC_ERROR_ENV: &str = "SYNDEO_EXEC_ERROR";

pub fn user_init(sp: &Spank) -> Result<(), ()> {
    if sp.context() != Context::Remote {
        return Ok(());
    }
    let cfg = config(sp)?;
    let job = sp.job_id().map_err(|e| log_error(&format!("syndeo: {e}")))?;
    let step = sp.step_id().unwrap_or(0);
    if step == EXTERN_STEP {
        return Ok(());
    }
    let dir = cfg.job_dir(job);
    if !dir.exists() {
        return Ok(()); // no syndeo cluster for this job on this node
    }
    if step == BATCH_STEP {
        for name in OPTION_ENV {
            let _ = sp.unsetenv(name);
        }
    }
    log_verbose(&format!("syndeo: job {job} step {step:#x}: waiting for the Ray cluster"));
    let failure = match wait_ready(&dir.join("agent.sock"), cfg.wait_timeout) {
        Ok(WaitReply::Ready { env }) => {
            for (k, v) in env {
                sp.setenv(&k, &v).map_err(|e| log_error(&format!("syndeo: {e}")))?;
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
    log_error(&format!("syndeo: {failure}"));
    sp.setenv(EXEC_ERROR_ENV, &failure).map_err(|e| log_error(&format!("syndeo: {e}")))
}

pub fn task_init(sp: &Spank) -> Result<(), ()> {
    if sp.context() != Context::Remote {
        return Ok(());
    }
    if sp.getenv(EXEC_ERROR_ENV).is_some() {
        let cfg = config(sp)?;
        let original =
            sp.replace_task_program(&cfg.agent.to_string_lossy()).map_err(|e| log_error(&format!("syndeo: {e}")))?;
        return sp.setenv(EXEC_ARGV0_ENV, &original).map_err(|e| log_error(&format!("syndeo: {e}")));
    }
    if sp.option_value().is_none() {
        return Ok(());
    }
    let step = sp.step_id().unwrap_or(0);
    if matches!(step, BATCH_STEP | EXTERN_STEP | INTERACTIVE_STEP) {
        return Ok(()); // the batch script itself runs on the host, with RAY_ADDRESS set
    }
    let cfg = config(sp)?;
    let job = sp.job_id().map_err(|e| log_error(&format!("syndeo: {e}")))?;
    if !cfg.job_dir(job).exists() {
        log_error(&format!(
            "syndeo: srun --syndeo: job {job} has no syndeo cluster on this node; \
             submit the job itself with --syndeo (sbatch/salloc --syndeo=IMAGE)"
        ));
        return Err(());
    }
    let agent = cfg.agent.to_string_lossy().into_owned();
    let original = sp.replace_task_program(&agent).map_err(|e| log_error(&format!("syndeo: {e}")))?;
    sp.setenv(EXEC_ARGV0_ENV, &original).map_err(|e| log_error(&format!("syndeo: {e}")))?;
    sp.setenv("SYNDEO_EXEC_JOB_DIR", &cfg.job_dir(job).to_string_lossy())
        .map_err(|e| log_error(&format!("syndeo: {e}")))
}
