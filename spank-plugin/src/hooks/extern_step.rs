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

#[cfg(test)]
mod tests {
    use super::super::fake::{FakeNode, FakeSpank, Script};
    use super::*;
    use crate::spank::RunningConf;

    const SPEC: &str = "/run/syndeo/.jobs/42/spec.json";

    fn extern_step(conf: RunningConf) -> FakeSpank {
        let mut sp = FakeSpank::new(Context::Remote);
        sp.step = EXTERN_STEP;
        sp.conf = conf;
        sp
    }

    fn contain() -> RunningConf {
        RunningConf { contain: true, ..RunningConf::default() }
    }

    #[test]
    fn the_extern_step_starts_a_prepared_jobs_agent_adopted_into_it() {
        let (sp, node) = (extern_step(contain()), FakeNode::with_paths(&[SPEC]));
        task_post_fork(&sp, &node).unwrap();
        let runs = node.runs();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].verb(), runs[0].adopt), ("start", Some(true)));
        assert!(runs[0].has("--job=42") && runs[0].has("--uid=1000"), "{runs:?}");
    }

    #[test]
    fn the_extern_step_starts_nothing_for_an_unprepared_job_another_step_or_where_the_prolog_starts_it() {
        let unprepared = (extern_step(contain()), FakeNode::default());
        let mut other_step = (extern_step(contain()), FakeNode::with_paths(&[SPEC]));
        other_step.0.step = 0;
        let run_in_job = (extern_step(RunningConf { run_in_job: true, ..contain() }), FakeNode::with_paths(&[SPEC]));
        let mut job_script = (extern_step(contain()), FakeNode::with_paths(&[SPEC]));
        job_script.0.context = Context::JobScript;
        for (name, (sp, node)) in
            [("unprepared", unprepared), ("step 0", other_step), ("RunInJob", run_in_job), ("prolog", job_script)]
        {
            task_post_fork(&sp, &node).unwrap();
            assert!(node.runs().is_empty(), "{name}");
        }
    }

    #[test]
    fn a_failed_start_is_logged_and_the_extern_step_goes_on() {
        let (sp, node) = (extern_step(contain()), FakeNode::with_paths(&[SPEC]));
        node.scripts.borrow_mut().push_back(Script::Exit(1, ""));
        task_post_fork(&sp, &node).unwrap();
        assert_eq!(sp.logged("error").len(), 1);
        assert!(sp.logged("error")[0].starts_with("syndeo: start failed on this node"), "{:?}", sp.logged("error"));
    }
}
