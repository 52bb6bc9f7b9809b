//! Slurm's per-job /tmp and /dev/shm (`job_container/tmpfs`; `namespace/tmpfs`
//! on 26.05), on a minicluster brought up with `--job-container`
//! (`tests/run --slurm R --suite site-job-container`). The core, first-things
//! and cgroups suites run here again, as they are (the modules below), and
//! these tests look at what the job container changes: the job's steps get a
//! private /tmp, Ray's temp dir lies outside it (syndeo moves its default out
//! of /tmp there) so `srun --syndeo` and every step see it, the logs are kept,
//! and nothing is left, Slurm's own per-job directories included.
use std::path::Path;
use std::time::Duration;

use syndeo_tests::*;

#[path = "cgroups.rs"]
mod cgroups_suite;
#[path = "core.rs"]
mod core_suite;
#[path = "new_user.rs"]
mod new_user_suite;

/// job_container.conf's BasePath on the minicluster (Slurm appends the node).
const JC_BASE: &str = "/var/spool/slurmd/job_container";

fn needs_job_container() {
    assert!(
        job_container_mode(),
        "the minicluster runs without Slurm's job container: bring it up with `tests/cluster/minicluster up --job-container`"
    );
}

/// Slurm's directory of `job`'s private /tmp on `node`, as the host sees it.
fn slurm_job_dir(node: &str, job: u32) -> String {
    format!("{}{JC_BASE}/{node}/{job}", root_prefix())
}

const HOLD_THEN: &str = "for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done\n";

#[test]
#[ignore = "needs the minicluster with --job-container (tests/run)"]
fn steps_get_a_private_tmp_while_ray_and_srun_syndeo_use_a_temp_dir_every_step_sees_and_nothing_is_left() {
    needs_job_container();
    let image = image();
    let dir = workdir(user_a(), "job-container");
    let script = format!(
        r#"#!/bin/bash
echo "TMP_OWNER $(stat -c %U /tmp)"
touch /tmp/jc-marker-$SLURM_JOB_ID
srun -N2 -n2 sh -c 'test -d /var/tmp/syndeo/$SLURM_JOB_ID/ray && echo TEMP_SEEN $(hostname)'
srun --syndeo -N1 -n1 python3 -c '
import ray
ray.init()
print("ALIVE", len([n for n in ray.nodes() if n["Alive"]]))
print("TASK", ray.get(ray.remote(lambda: 6 * 7).remote()))
'
echo READY
{HOLD_THEN}"#
    );
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("READY", Duration::from_secs(300));
    // The step's /tmp is the job's own: the node's /tmp has no marker, and
    // Slurm's directory for the job exists on each node.
    let marker = format!("/tmp/jc-marker-{}", job.id);
    assert!(!node_path_exists("node1", &marker), "the batch step's /tmp is the node's: the job container is not on");
    for node in ["node1", "node2"] {
        assert!(Path::new(&slurm_job_dir(node, job.id)).is_dir(), "no {}", slurm_job_dir(node, job.id));
    }
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    assert!(
        out.contains(&format!("TMP_OWNER {user_a}", user_a = user_a())),
        "the step's /tmp is not the job's private one: {out}"
    );
    for node in ["node1", "node2"] {
        assert!(out.contains(&format!("TEMP_SEEN {node}")), "a step on {node} does not see Ray's temp dir: {out}");
    }
    assert!(out.contains("ALIVE 2") && out.contains("TASK 42"), "{}", job.output());
    // Ray's logs (in the temp dir) were kept, though Slurm removes the job's
    // private /tmp before the epilog.
    let kept = dir.join(format!("syndeo-{}", job.id));
    for node in ["node1", "node2"] {
        assert!(kept.join(node).join("agent.log").is_file(), "no agent log of {node} kept");
        assert!(kept.join(node).join("ray").is_dir(), "no Ray logs of {node} kept");
        assert!(!Path::new(&slurm_job_dir(node, job.id)).exists(), "{} is left", slurm_job_dir(node, job.id));
    }
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster with --job-container (tests/run)"]
fn a_temp_base_set_inside_the_private_tmp_fails_the_job_naming_the_fix_and_drains_nothing() {
    needs_job_container();
    let _temp = ConfigOverride::set("temp_base", r#""/tmp/ray-site""#);
    let dir = workdir(user_a(), "job-container-temp-base");
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={}", image())], SCRIPT_RAN);
    let out = job.assert_refused(Duration::from_secs(180), "temp_base /tmp/ray-site lies in /tmp");
    assert!(out.contains("Dirs=/tmp,/dev/shm") && out.contains("set temp_base"), "{out}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    assert_clean(&job, user_a());
}
