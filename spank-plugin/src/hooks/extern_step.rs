//! The job's extern step (PrologFlags=Contain): Slurm's container for
//! everything of a job that is not one of its steps, on every node of the
//! job. Its `task_post_fork` runs as root once the step's cgroups exist;
//! there the plugin starts the node agent of a job the prolog prepared, added
//! to the step first (see `launch.rs`). Whatever goes wrong is logged and
//! the step goes on: the job's own steps report a cluster that did not come.
use crate::hooks::config;
use crate::hooks::job_script::{prepared, start_agent};
use crate::launch::{launch, Launch};
use crate::node::Node;
use crate::spank::{Context, Spank, EXTERN_STEP};
use crate::HookResult;

pub fn task_post_fork(sp: &dyn Spank, node: &dyn Node) -> HookResult {
    if sp.context() != Context::Remote || sp.step_id().ok() != Some(EXTERN_STEP) {
        return Ok(());
    }
    if launch(&sp.running_conf()) != Launch::ExternStep {
        return Ok(());
    }
    let cfg = config(sp)?;
    let (job, uid) = (sp.job_id()?, sp.uid()?);
    if !prepared(node, &cfg, job) {
        return Ok(()); // not a syndeo job, or refused on this node
    }
    if let Err(e) = start_agent(sp, node, &cfg, job, uid, true) {
        sp.log_error(&e.0);
    }
    Ok(())
}
