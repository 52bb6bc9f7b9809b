//! The Ray versions users bring: one end-to-end job per test image (built
//! and cached by tests/image/build). Ray 2.52 and later (token auth) gets a
//! working cluster that refuses a driver with a wrong token; older Ray is
//! refused with the versions and the site setting named, and runs (with one
//! warning) where the site allows it. A driver run on the host whose Ray
//! differs from the cluster's gets one line that says so.
use std::time::Duration;

use syndeo_tests::*;

/// The driver inside the image, then one with a wrong token.
const SCRIPT: &str = r#"#!/bin/bash
srun --syndeo -N1 -n1 python3 -c '
import ray, sys
ray.init()
print("VERSION", ray.__version__, "%d.%d" % sys.version_info[:2])
print("ALIVE", len([n for n in ray.nodes() if n["Alive"]]))
print("TASK", ray.get(ray.remote(lambda: 6 * 7).remote()))
'
srun --syndeo -N1 -n1 env RAY_AUTH_TOKEN=0123456789abcdef0123456789abcdef python3 -c '
import ray
ray.init()
print("WRONG TOKEN ACCEPTED", len(ray.nodes()))
' > wrong.out 2>&1
echo "WRONG_TOKEN_EXIT=$?"
"#;

/// A job of two nodes on `image`; its final state and the job.
fn run_job(image: &str, name: &str) -> (String, Job) {
    let dir = workdir(user_a(), name);
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], SCRIPT);
    let state = job.wait(Duration::from_secs(600));
    (state, job)
}

/// A cluster that works, runs the image's Ray and Python, and refuses a
/// driver with a wrong token.
fn assert_authenticated_cluster(image: &str, ray: &str, python: &str, name: &str) {
    let (state, job) = run_job(image, name);
    assert_eq!(state, "COMPLETED", "{}", job.output());
    let out = job.stdout();
    assert!(out.contains(&format!("VERSION {ray} {python}")), "{}", job.output());
    assert!(out.contains("ALIVE 2") && out.contains("TASK 42"), "{}", job.output());
    let wrong = std::fs::read_to_string(job.dir.join("wrong.out")).unwrap_or_default();
    assert!(!wrong.contains("WRONG TOKEN ACCEPTED"), "a driver with a wrong token joined: {wrong}");
    assert!(!out.contains("WRONG_TOKEN_EXIT=0"), "{}\n{wrong}", job.output());
    assert!(!job.stderr().contains("WARNING"), "{}", job.output());
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}

/// Refused before anything of the user's ran, naming the image's versions,
/// the minimum and the setting; no node drained.
fn assert_refused(image: &str, ray: &str, name: &str) {
    let (state, job) = run_job(image, name);
    assert_ne!(state, "COMPLETED", "{}", job.output());
    let err = job.stderr();
    for part in [format!("has Ray {ray} (Python 3.11"), "2.52.0".into(), "allow_unauthenticated_ray = true".into()] {
        assert!(err.contains(&part), "{part:?} missing: {}", job.output());
    }
    assert!(!job.stdout().contains("VERSION"), "{}", job.output());
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_60_on_python_3_11_runs_with_token_auth_and_refuses_a_wrong_token() {
    assert_authenticated_cluster(&image_of_ray("2.60.0", "bookworm"), "2.60.0", "3.11", "ray-2.60-py3.11");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_60_on_python_3_13_runs_with_token_auth_and_refuses_a_wrong_token() {
    assert_authenticated_cluster(&image_of_ray("2.60.0", "trixie"), "2.60.0", "3.13", "ray-2.60-py3.13");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_52_the_first_with_token_auth_runs_and_refuses_a_wrong_token() {
    assert_authenticated_cluster(&image_of_ray("2.52.1", "bookworm"), "2.52.1", "3.11", "ray-2.52");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_40_without_token_auth_is_refused_naming_the_versions_and_the_setting() {
    assert_refused(&image_of_ray("2.40.0", "bookworm"), "2.40.0", "ray-2.40-refused");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_9_is_refused_naming_the_versions_and_the_setting() {
    assert_refused(&image_of_ray("2.9.3", "bookworm"), "2.9.3", "ray-2.9-refused");
}

/// Where the site allows it, Ray 2.40 and 2.9 run (their flags fitted to
/// what their `ray start` knows), and the job's stderr says once that
/// anyone who can reach the nodes can join, and once that its nodes carry
/// no Slurm labels.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_2_40_and_2_9_run_where_the_site_allows_it_and_the_job_is_warned_once() {
    let images = [(image_of_ray("2.40.0", "bookworm"), "2.40.0"), (image_of_ray("2.9.3", "bookworm"), "2.9.3")];
    let _allow = ConfigOverride::set("allow_unauthenticated_ray", "true");
    for (image, ray) in images {
        let (state, job) = run_job(&image, &format!("ray-{ray}-allowed"));
        assert_eq!(state, "COMPLETED", "{}", job.output());
        let out = job.stdout();
        assert!(out.contains(&format!("VERSION {ray} 3.11")) && out.contains("ALIVE 2"), "{}", job.output());
        let warnings = job.stderr().matches("anyone who can reach the job's nodes can join").count();
        assert_eq!(warnings, 1, "{}", job.output());
        // No label selectors before Ray 2.49: no labels, and one line says so.
        let no_labels = job.stderr().matches("which has no label selectors").count();
        assert_eq!(no_labels, 1, "{}", job.output());
        let left = leftovers(job.id, user_a());
        assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
    }
}

/// From Ray 2.54 the raylet waits a fixed 15 s for the dashboard agent's
/// listen-port file and aborts past it; on a loaded node, or from a slow
/// file system, the agent takes longer. Here it starts 25 s late on every
/// node: syndeo gives the raylet that port itself, so every node joins, the
/// cluster is ready, and a task runs.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_dashboard_agent_slower_than_the_raylets_own_15_s_wait_still_gives_a_working_cluster() {
    let image = image_with_slow_dashboard_agent(25);
    assert_authenticated_cluster(&image, "2.60.0", "3.11", "slow-agent");
}

/// A driver run on the host (plain `srun python3`) in a job whose cluster
/// runs Ray 2.52.1 on Python 3.11: the host's Python without Ray, and with
/// another Ray (a stand-in package whose `_version.py` says 2.60.0: the
/// hook reads only that, as Ray's own package has it), each get one line naming both and `srun --syndeo`.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_host_driver_whose_ray_differs_from_the_clusters_is_told_once_to_use_srun_syndeo() {
    let cluster = image_of_ray("2.52.1", "bookworm");
    let host_python = text(&in_node("node1", &["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]));
    let minor = host_python.trim();
    let script = r#"#!/bin/bash
srun -N1 -n1 python3 -c 'import ray' 2> noray.err
mkdir -p other/ray && touch other/ray/__init__.py && echo 'version = "2.60.0"' > other/ray/_version.py
PYTHONPATH=$PYTHONPATH:$PWD/other srun -N1 -n1 python3 -c 'import ray; import ray' 2> other.err
echo DONE
"#;
    let dir = workdir(user_a(), "host-driver");
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={cluster}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let noray = std::fs::read_to_string(dir.join("noray.err")).unwrap_or_default();
    let lines: Vec<&str> = noray.lines().filter(|l| l.starts_with("syndeo:")).collect();
    assert_eq!(lines.len(), 1, "{noray}");
    assert!(lines[0].contains("has no Ray") && lines[0].contains("Ray 2.52.1 on Python 3.11"), "{noray}");
    assert!(lines[0].contains("srun --syndeo"), "{noray}");
    let other_err = std::fs::read_to_string(dir.join("other.err")).unwrap_or_default();
    let lines: Vec<&str> = other_err.lines().filter(|l| l.starts_with("syndeo:")).collect();
    assert_eq!(lines.len(), 1, "{other_err}");
    assert!(lines[0].contains(&format!("has Ray 2.60.0 on Python {minor}")), "{other_err}");
    assert!(lines[0].contains("runs Ray 2.52.1 on Python 3.11") && lines[0].contains("srun --syndeo"), "{other_err}");
}
