//! The job's extern step (PrologFlags=Contain): Slurm's container for
//! everything of a job that is not one of its steps, on every node of the
//! job. Its `task_post_fork` runs as root once the step's cgroups exist;
//! there the plugin starts the node agent of a job the prolog prepared, added
//! to the step first (see `launch.rs`). Whatever goes wrong is logged and
//! the step goes on: the job's own steps report a cluster that did not come.
use crate::ffi::{log_error, running_conf, Context, Spank, EXTERN_STEP};
use crate::hooks::config;
use crate::hooks::job_script::{prepared, start_agent};
use crate::launch::{launch, Launch};
use crate::HookResult;

pub fn task_post_fork(sp: &Spank) -> HookResult {
    if sp.context() != Context::Remote || sp.step_id().ok() != Some(EXTERN_STEP) {
        return Ok(());
    }
    if launch(&running_conf()) != Launch::ExternStep {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    if !prepared(&cfg, job) {
        return Ok(()); // not a syndeo job, or refused on this node
    }
    if let Err(e) = start_agent(&cfg, job, uid, true) {
        log_error(&e.0);
    }
    Ok(())
}
