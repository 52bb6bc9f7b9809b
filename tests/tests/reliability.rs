//! Reliability on the minicluster: cancellation at any moment, a killed or
//! frozen agent, and broken images or nodes each end with a clean node, no
//! drained node, and (for a user's mistake) a message that names the fix.
use std::time::Duration;

use syndeo_tests::*;

const HOLD: &str = "#!/bin/bash\necho READY $RAY_ADDRESS\nsleep 300\n";

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn scancel_during_prolog_start_up_and_run_leaves_nothing_and_drains_nothing() {
    let image = image();
    let dir = workdir(user_a(), "scancel");
    for (phase, delay) in [("prolog", Some(0.2)), ("start-up", Some(2.0)), ("running", None)] {
        let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], HOLD);
        match delay {
            Some(s) => std::thread::sleep(Duration::from_secs_f64(s)),
            None => {
                job.wait_line("READY ", Duration::from_secs(180));
            }
        }
        run(&["scancel", &job.id.to_string()]);
        let state = job.wait(Duration::from_secs(180));
        assert_eq!(state, "CANCELLED", "cancelled in {phase}: {}", job.output());
        assert_clean(&job, user_a());
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn epilog_cleans_up_after_an_agent_killed_with_sigkill_and_one_frozen() {
    let image = image();
    let dir = workdir(user_a(), "agent-faults");
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], HOLD);
    job.wait_line("READY ", Duration::from_secs(180));
    // Killed for good (its supervisor too), and frozen: the worst cases.
    kill_agent_for_good(job.id, "node2");
    let frozen = agent_pid(job.id, "node3").expect("agent on node3");
    run(&["kill", "-STOP", &frozen.to_string()]);
    run(&["scancel", &job.id.to_string()]);
    job.wait(Duration::from_secs(180));
    assert!(std::fs::metadata(format!("/proc/{frozen}")).is_err(), "the frozen agent survived the epilog");
    assert_clean(&job, user_a());
    for n in ["node2", "node3"] {
        assert!(
            slurmd_log(n).contains(&format!("syndeo: epilog for job {}: node clean in", job.id)),
            "no clean epilog on {n}"
        );
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn image_without_ray_fails_the_job_with_the_fix_and_drains_no_node() {
    let noray = image_without_ray();
    let dir = workdir(user_a(), "noray");
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={noray}")], SCRIPT_RAN);
    job.assert_refused(
        Duration::from_secs(180),
        "the image has no `ray` command on its PATH; install Ray in the image",
    );
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn missing_container_runtime_fails_the_job_naming_the_node_fault() {
    let image = image();
    let dir = workdir(user_a(), "noruntime");
    // The running runtime's binary (runtime() is "bubblewrap" or "apptainer").
    let (key, name) = match runtime().as_str() {
        "apptainer" => ("apptainer", "apptainer"),
        _ => ("bwrap", "bubblewrap"),
    };
    let job = {
        let _broken = ConfigOverride::set(key, &format!("\"/nonexistent/{key}\""));
        let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
        job.wait(Duration::from_secs(180));
        job
    };
    let out = job.output();
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(
        out.contains(&format!(
            "node fault: the container runtime {name} (/nonexistent/{key}) is not installed on this node"
        )),
        "{out}"
    );
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn invalid_site_config_fails_syndeo_jobs_with_the_reason_and_drains_no_node() {
    let image = image();
    let dir = workdir(user_a(), "badconfig");
    let job = {
        let _broken = ConfigOverride::set("startup_timeout", "\"soon\"");
        let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
        job.wait(Duration::from_secs(120));
        job
    };
    let out = job.output();
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(out.contains("syndeo's site configuration is invalid") && out.contains("/etc/syndeo/syndeo.toml"), "{out}");
    assert!(slurmd_log("node1").contains("syndeo's site configuration is invalid"), "not in slurmd's log");
    assert_clean(&job, user_a());
    // Jobs without --syndeo were never affected, and syndeo jobs work again once fixed.
    let plain = sbatch(user_a(), &dir, &["-N2"], "#!/bin/sh\necho PLAIN RAN\n");
    assert_eq!(plain.wait(Duration::from_secs(60)), "COMPLETED");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_link_lost_during_start_up_fails_the_job_within_the_start_up_timeout_naming_the_node() {
    let image = image();
    let dir = workdir(user_a(), "linkdown");
    let job = {
        // Long enough for node2 to join on a busy machine, short for the test.
        let _short = ConfigOverride::set("startup_timeout", "40");
        let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
        job.wait_for_agent(job.id, "node3", Duration::from_secs(120));
        let _down = LinkDown::new("node3");
        // The job's steps learn of the failure from the head within the start-up timeout.
        job.wait_stderr("could not start", Duration::from_secs(90));
        job
    };
    let state = job.wait(Duration::from_secs(240));
    let out = job.output();
    assert_ne!(state, "COMPLETED", "{out}");
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(out.contains("within the start-up timeout (40 s)") && out.contains("missing: [\"node3\"]"), "{out}");
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn restarting_slurm_daemons_during_a_job_keeps_its_cluster_and_it_is_cleaned_later() {
    let image = image();
    let dir = workdir(user_a(), "slurmd-restart");
    let script = r#"#!/bin/bash
echo READY $RAY_ADDRESS
for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("NODES", len([n for n in ray.nodes() if n["Alive"]]))'
"#;
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], script);
    job.wait_line("READY ", Duration::from_secs(180));
    let o = run(&[minicluster().to_str().unwrap(), "restart"]);
    assert!(o.status.success(), "{}", text(&o));
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(240)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("NODES 3"), "{}", job.output());
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_workers_ray_that_dies_is_restarted_and_rejoins_with_one_line_in_the_job_output() {
    let image = image();
    let dir = workdir(user_a(), "ray-restart");
    let script = r#"#!/bin/bash
echo READY $RAY_ADDRESS
for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("ALIVE", len({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}))'
"#;
    // (Distinct addresses: Ray lists a SIGKILLed raylet as alive until its
    // health checks expire, beside the one that replaced it.)
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], script);
    job.wait_line("READY ", Duration::from_secs(180));
    let raylet = job_process(job.id, "node2", "/usr/local/lib/python3.11/dist-packages/ray/core/src/ray/raylet/raylet")
        .expect("a raylet on node2");
    run(&["kill", "-KILL", &raylet.to_string()]);
    job.wait_stderr("rejoined the cluster", Duration::from_secs(120));
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    let err = job.stderr();
    let notices: Vec<&str> = err.lines().filter(|l| l.contains("died while the job ran")).collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(notices[0].contains("on node2") && notices[0].contains("(1 of 3)"), "{}", notices[0]);
    assert!(job.stdout().contains("ALIVE 3"), "{}", job.output());
    assert_clean(&job, user_a());
}

const GCS_SERVER: &str = "/usr/local/lib/python3.11/dist-packages/ray/core/src/ray/gcs/gcs_server";
/// syndeo's launcher script in the container, run by path from the job's temp dir.
const COUNT_ALIVE: &str =
    r#"import ray; ray.init(); print("ALIVE", len({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}))"#;

/// Waits for a process of `job` on `node` whose command line starts with `prefix`.
fn wait_for_process(job: u32, node: &str, prefix: &str, limit: Duration) -> i32 {
    let t = std::time::Instant::now();
    loop {
        if let Some(p) = job_process(job, node, prefix) {
            return p;
        }
        assert!(t.elapsed() < limit, "job {job}: no {prefix} on {node} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_head_whose_ray_dies_before_ready_steps_down_and_the_next_node_heads_all_three() {
    let image = image();
    let dir = workdir(user_a(), "head-steps-down");
    let script = format!(
        "#!/bin/bash\necho READY $SYNDEO_HEAD $SYNDEO_NODES\nsrun --syndeo -N1 -n1 python3 -c '{COUNT_ALIVE}'\n"
    );
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], &script);
    // The head's GCS is starting, so the cluster is not ready yet: end the
    // head's container (its launcher, by PID).
    wait_for_process(job.id, "node1", GCS_SERVER, Duration::from_secs(120));
    let launcher = launcher_pid(job.id, "node1").expect("the launcher on node1");
    run(&["kill", "-KILL", &launcher.to_string()]);
    assert_eq!(job.wait(Duration::from_secs(240)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    assert!(out.contains("READY node2 node1,node2,node3"), "{}", job.output());
    assert!(out.contains("ALIVE 3"), "{}", job.output());
    let err = job.stderr();
    let notices: Vec<&str> = err.lines().filter(|l| l.contains("dropped out")).collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(
        notices[0].starts_with("syndeo: the Ray head on node1 dropped out before the cluster was ready (")
            && notices[0].ends_with("; node2 is the head now"),
        "{}",
        notices[0]
    );
    assert_clean(&job, user_a());
}

/// The name of the salloc jobs below, so that they are found and no other.
const SALLOC_NAME: &str = "syndeo-head-lost";

/// `salloc -N3 --syndeo=IMAGE srun -w node3 --syndeo python3 -c COUNT_ALIVE`
/// as user A, in a thread; the job's id once Slurm lists it.
fn salloc_counting_from_node3(dir: &std::path::Path, image: &str) -> (Job, std::thread::JoinHandle<String>) {
    let (dir, image) = (dir.to_path_buf(), image.to_string());
    let d = dir.clone();
    let salloc = std::thread::spawn(move || {
        let syndeo = format!("--syndeo={image}");
        let argv = [
            "salloc",
            "-N3",
            "--job-name",
            SALLOC_NAME,
            &syndeo,
            "srun",
            "-N1",
            "-n1",
            "-w",
            "node3",
            "--syndeo",
            "python3",
            "-c",
            COUNT_ALIVE,
        ];
        text(&as_user(user_a(), &d, &argv))
    });
    let t = std::time::Instant::now();
    let id = loop {
        let o = run(&["squeue", "-h", "-u", user_a(), "-n", SALLOC_NAME, "-o", "%i"]);
        if let Some(id) = text(&o).lines().next().and_then(|l| l.trim().parse().ok()) {
            break id;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "salloc made no job");
        std::thread::sleep(Duration::from_millis(50));
    };
    (Job { id, dir }, salloc)
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_heads_agent_killed_for_good_before_ready_leaves_the_next_node_heading_the_rest_or_fails_below_min_nodes() {
    let image = image();
    let dir = workdir(user_a(), "head-lost");
    for (min_nodes, expect) in [("2", "ALIVE 2"), ("0", "only 2 of the job's 3 nodes are left and the cluster needs 3 (min_nodes): node1: its agent stopped answering")] {
        let _min = ConfigOverride::set("min_nodes", min_nodes);
        let (job, salloc) = salloc_counting_from_node3(&dir, &image);
        wait_for_process(job.id, "node1", GCS_SERVER, Duration::from_secs(120));
        kill_agent_for_good(job.id, "node1");
        let out = salloc.join().unwrap();
        assert!(out.contains(expect), "min_nodes {min_nodes}: {out}");
        job.wait(Duration::from_secs(180));
        assert_clean(&job, user_a());
    }
}

/// Waits (90 s at most) until the cluster lists 3 live Ray nodes, on 3
/// addresses: a Ray node killed with its agent stays listed as alive until
/// the GCS's health checks fail, beside the one that replaced it. (The
/// driver runs on node1: the minicluster's nodes share one PID namespace, so
/// Ray's driver sees every node's raylet as local and takes the head's socket
/// name, which on a node with a restarted raylet is the dead one's.)
const ALL_ALIVE: &str = r#"import ray, time
ray.init()
t = time.time()
while True:
    n = [x for x in ray.nodes() if x["Alive"]]
    if len(n) == 3 and len({x["NodeManagerAddress"] for x in n}) == 3 or time.time() - t > 90:
        break
    time.sleep(1)
print("ALIVE", len({x["NodeManagerAddress"] for x in n}), "OF", len(n))"#;

/// The batch script runs on the first node. Its agent is killed while the
/// head's GCS starts: its supervisor starts it again, it rejoins as a worker
/// of the next head, and the script gets the cluster from it. Then a
/// worker's agent is killed while the job runs, and it rejoins too. Each
/// restart is one line in the job's stderr.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_killed_agent_is_restarted_and_rejoins_so_the_batch_script_on_its_node_still_gets_the_cluster() {
    let image = image();
    let dir = workdir(user_a(), "agent-restart");
    let script = format!(
        "#!/bin/bash\necho READY $SYNDEO_HEAD $SYNDEO_NODES\n\
         srun --syndeo -N1 -n1 -w node1 python3 -c '{COUNT_ALIVE}'\n\
         echo WAITING\nfor i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done\n\
         srun --syndeo -N1 -n1 -w node1 python3 -c '{ALL_ALIVE}'\n"
    );
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id]);
    wait_for_process(job.id, "node1", GCS_SERVER, Duration::from_secs(120));
    run(&["kill", "-KILL", &agent_pid(job.id, "node1").expect("the agent on node1").to_string()]);
    assert_eq!(job.wait_line("READY ", Duration::from_secs(180)), "node2 node1,node2,node3", "{}", job.output());

    job.wait_line("WAITING", Duration::from_secs(120));
    run(&["kill", "-KILL", &agent_pid(job.id, "node3").expect("the agent on node3").to_string()]);
    job.wait_stderr("node agent on node3", Duration::from_secs(120));
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    let alive: Vec<&str> = out.lines().filter(|l| l.starts_with("ALIVE")).collect();
    assert_eq!(alive, ["ALIVE 3", "ALIVE 3 OF 3"], "{}", job.output());
    let err = job.stderr();
    let restarts: Vec<&str> = err.lines().filter(|l| l.contains("it was restarted")).collect();
    assert_eq!(restarts.len(), 2, "{err}");
    for (line, node) in restarts.iter().zip(["node1", "node3"]) {
        let want = format!(
            "syndeo: the node agent on {node} was killed by SIGKILL; it was restarted (1 of 3) and {node} rejoined the cluster"
        );
        assert_eq!(*line, want, "{err}");
    }
    assert!(err.contains("syndeo: the Ray head on node1 dropped out before the cluster was ready"), "{err}");
    assert_clean(&job, user_a());
}

/// Makes a node's runtime base (/run/syndeo, its own tmpfs) read-only; puts
/// it back and resumes the node when dropped, whatever the test did.
struct ReadOnlyBase(&'static str);

impl ReadOnlyBase {
    fn new(node: &'static str) -> ReadOnlyBase {
        let o = in_node(node, &["mount", "-o", "remount,ro", "/run/syndeo"]);
        assert!(o.status.success(), "{}", text(&o));
        ReadOnlyBase(node)
    }
}

impl Drop for ReadOnlyBase {
    fn drop(&mut self) {
        in_node(self.0, &["mount", "-o", "remount,rw", "/run/syndeo"]);
        run(&["scontrol", "update", &format!("NodeName={}", self.0), "State=RESUME"]);
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn an_unwritable_runtime_base_drains_only_that_node_with_a_reason_that_names_it() {
    let image = image();
    let dir = workdir(user_a(), "readonly-base");
    {
        let _ro = ReadOnlyBase::new("node3");
        let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
        let _cancel = CancelOnDrop(vec![job.id]);
        let t = std::time::Instant::now();
        let reason = loop {
            let o = run(&["sinfo", "-h", "-n", "node3", "-o", "%E"]);
            let r = text(&o).trim().to_string();
            if !r.is_empty() && r != "none" {
                break r;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "node3 was not drained: {}", job.output());
            std::thread::sleep(Duration::from_millis(250));
        };
        assert!(reason.starts_with("syndeo: node fault in the prolog of job"), "{reason}");
        assert!(reason.contains("/run/syndeo") && reason.contains("Read-only file system"), "{reason}");
        let drained = drained_nodes();
        assert!(drained.len() == 1 && drained[0].starts_with("node3 "), "{drained:?}");
        // Slurm requeues a job whose prolog failed, and a requeue that comes
        // after an scancel undoes it: cancel until the job is over.
        let t = std::time::Instant::now();
        while !matches!(job.field("JobState").as_deref(), Some("CANCELLED" | "FAILED" | "COMPLETED")) {
            assert!(t.elapsed() < Duration::from_secs(120), "job {} would not end", job.id);
            run(&["scancel", &job.id.to_string()]);
            std::thread::sleep(Duration::from_secs(1));
        }
        job.wait(Duration::from_secs(120));
        assert!(!job.stdout().contains("SCRIPT RAN"), "{}", job.output());
    }
    assert!(drained_nodes().is_empty(), "{:?}", drained_nodes());
    // The node serves syndeo jobs again once its base is fixed and it is resumed.
    let job =
        sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN $SYNDEO_NODES\n");
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("SCRIPT RAN node1,node2,node3"), "{}", job.output());
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}
