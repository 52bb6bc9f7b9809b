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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fake::{FakeNode, FakeSpank};
    use super::*;

    const JOB_DIR: &str = "/run/syndeo/42";

    fn step(step: u32) -> FakeSpank {
        let mut sp = FakeSpank::new(Context::Remote);
        sp.step = step;
        sp
    }

    fn node_answering(reply: Result<WaitReply, String>) -> FakeNode {
        FakeNode { wait: Some(reply), ..FakeNode::with_paths(&[JOB_DIR]) }
    }

    fn ready(vars: &[(&str, &str)]) -> Result<WaitReply, String> {
        let env: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Ok(WaitReply::Ready { env })
    }

    #[test]
    fn a_step_gets_the_clusters_variables_with_syndeos_pythonpath_before_its_own() {
        let sp = step(0);
        sp.set_env("PYTHONPATH", "/home/ada/lib");
        let node = node_answering(ready(&[("RAY_ADDRESS", "10.0.0.1:6379"), ("PYTHONPATH", "/syndeo/python")]));
        user_init(&sp, &node).unwrap();
        assert_eq!(sp.env("RAY_ADDRESS").as_deref(), Some("10.0.0.1:6379"));
        assert_eq!(sp.env("PYTHONPATH").as_deref(), Some("/syndeo/python:/home/ada/lib"));
        assert_eq!(sp.env(env::EXEC_ERROR), None);
    }

    #[test]
    fn a_failed_cluster_is_told_to_the_steps_tasks_and_never_fails_the_hook() {
        let sp = step(0);
        let node = node_answering(Ok(WaitReply::Failed { error: "no python3 in the image".into() }));
        user_init(&sp, &node).unwrap();
        let told = "the Ray cluster of job 42 could not start: no python3 in the image";
        assert_eq!(sp.env(env::EXEC_ERROR).as_deref(), Some(told));
        assert_eq!(sp.logged("error"), [format!("syndeo: {told}")]);
    }

    #[test]
    fn a_cluster_not_ready_in_time_or_an_unreachable_agent_is_told_with_the_cause() {
        let sp = step(0);
        user_init(&sp, &node_answering(Ok(WaitReply::Starting { detail: "2 of 3 nodes".into() }))).unwrap();
        let told = sp.env(env::EXEC_ERROR).unwrap();
        assert_eq!(told, "the Ray cluster of job 42 was not ready after 900 s (2 of 3 nodes)");
        let sp = step(0);
        user_init(&sp, &node_answering(Err("the node agent ended".into()))).unwrap();
        assert_eq!(sp.env(env::EXEC_ERROR).as_deref(), Some("job 42: the node agent ended"));
    }

    #[test]
    fn the_batch_script_loses_slurms_option_variables_so_its_sruns_are_plain() {
        let sp = step(BATCH_STEP);
        for name in env::OPTION_VARS {
            sp.set_env(name, "/img");
        }
        sp.set_env("HOME", "/home/ada");
        user_init(&sp, &node_answering(ready(&[]))).unwrap();
        assert!(env::OPTION_VARS.iter().all(|n| sp.env(n).is_none()));
        assert_eq!(sp.env("HOME").as_deref(), Some("/home/ada"));
    }

    #[test]
    fn syndeos_own_status_step_gets_the_job_dir_without_waiting() {
        let sp = step(3);
        sp.set_env(env::NO_WAIT, "1");
        let node = FakeNode::with_paths(&[JOB_DIR]); // a wait would panic: none scripted
        user_init(&sp, &node).unwrap();
        assert_eq!(sp.env(env::JOB_DIR).as_deref(), Some(JOB_DIR));
        assert_eq!(*node.waited.borrow(), 0);
    }

    #[test]
    fn no_wait_in_the_extern_step_in_a_job_without_a_cluster_or_outside_slurmstepd() {
        let with_dir = FakeNode::with_paths(&[JOB_DIR]);
        user_init(&step(EXTERN_STEP), &with_dir).unwrap();
        user_init(&step(0), &FakeNode::default()).unwrap();
        let mut local = step(0);
        local.context = Context::Local;
        user_init(&local, &with_dir).unwrap();
        assert_eq!(*with_dir.waited.borrow(), 0);
    }

    #[test]
    fn srun_syndeo_runs_the_task_through_the_agents_exec_wrapper() {
        let mut sp = step(1);
        sp.option = Some(None);
        task_init(&sp, &FakeNode::with_paths(&[JOB_DIR])).unwrap();
        assert_eq!(*sp.argv0.borrow(), "/opt/syndeo-agent");
        assert_eq!(sp.env(env::EXEC_ARGV0).as_deref(), Some("python3"));
        assert_eq!(sp.env(env::EXEC_JOB_DIR).as_deref(), Some(JOB_DIR));
    }

    #[test]
    fn srun_syndeo_in_a_job_without_a_cluster_is_refused_with_what_to_do() {
        let mut sp = step(1);
        sp.option = Some(Some("/img".into()));
        let e = task_init(&sp, &FakeNode::default()).unwrap_err();
        assert!(e.0.contains("job 42 has no syndeo cluster on this node"), "{}", e.0);
        assert!(e.0.contains("submit the job itself with --syndeo"), "{}", e.0);
        assert_eq!(*sp.argv0.borrow(), "python3");
    }

    #[test]
    fn every_task_of_a_failed_cluster_runs_the_wrapper_which_prints_the_cause() {
        let sp = step(BATCH_STEP);
        sp.set_env(env::EXEC_ERROR, "the Ray cluster of job 42 could not start");
        task_init(&sp, &FakeNode::default()).unwrap();
        assert_eq!(*sp.argv0.borrow(), "/opt/syndeo-agent");
        assert_eq!(sp.env(env::EXEC_ARGV0).as_deref(), Some("python3"));
        assert_eq!(sp.env(env::EXEC_JOB_DIR), None);
    }

    #[test]
    fn plain_tasks_and_the_batch_extern_and_interactive_steps_run_their_own_program() {
        let node = FakeNode::with_paths(&[JOB_DIR]);
        let plain = step(1);
        task_init(&plain, &node).unwrap();
        assert_eq!(*plain.argv0.borrow(), "python3");
        for special in [BATCH_STEP, EXTERN_STEP, INTERACTIVE_STEP] {
            let mut sp = step(special);
            sp.option = Some(None);
            task_init(&sp, &node).unwrap();
            assert_eq!(*sp.argv0.borrow(), "python3", "{special:#x}");
            assert_eq!(sp.env(env::EXEC_ARGV0), None);
        }
    }
}
