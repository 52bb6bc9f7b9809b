//! Core: `sbatch --syndeo=IMAGE` gives the job a ready Ray cluster on all its
//! nodes, `srun --syndeo` runs a driver in the image on it, and when the job
//! ends nothing of it is left on any node.
use std::time::Duration;

use syndeo_tests::*;

const DRIVER: &str = r#"
import collections, os, socket, time
import ray
ray.init()  # no arguments: RAY_ADDRESS and the auth token come from syndeo
alive = [n for n in ray.nodes() if n["Alive"]]
print("ALIVE_NODES", len(alive))

@ray.remote(num_cpus=1)
def where(i):
    time.sleep(0.2)
    return socket.gethostname()

@ray.remote
def make(n):
    return b"x" * n

@ray.remote
def size(b):
    return len(b)

node_ids = [n["NodeID"] for n in alive]
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
hosts = ray.get([where.options(scheduling_strategy=On(nid, soft=False)).remote(i) for i, nid in enumerate(node_ids)])
print("TASK_HOSTS", ",".join(sorted(hosts)))
# Objects made on each node and consumed on another: real transfers.
blobs = [make.options(scheduling_strategy=On(nid, soft=False)).remote(4 << 20) for nid in node_ids]
moved = ray.get([size.options(scheduling_strategy=On(node_ids[(i + 1) % len(node_ids)], soft=False)).remote(b) for i, b in enumerate(blobs)])
print("TRANSFERS", len(moved), sum(moved))
print("DRIVER OK")
"#;

const SCRIPT: &str = r#"#!/bin/bash
echo "RAY_ADDRESS=$RAY_ADDRESS"
echo "SYNDEO_NODES=$SYNDEO_NODES"
srun --syndeo -N1 -n1 python3 driver.py
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn batch_job_gets_a_three_node_ray_cluster_and_leaves_nothing_behind() {
    let image = image();
    let dir = workdir(user_a(), "core");
    write_file(user_a(), &dir.join("driver.py"), DRIVER);
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], SCRIPT);
    let state = job.wait(Duration::from_secs(300));
    let out = job.output();
    assert_eq!(state, "COMPLETED", "{out}");
    assert!(out.contains(&format!("RAY_ADDRESS={}.", bridge_prefix())), "{out}");
    assert!(out.contains("SYNDEO_NODES=node1,node2,node3"), "{out}");
    assert!(out.contains("ALIVE_NODES 3"), "{out}");
    assert!(out.contains("TASK_HOSTS node1,node2,node3"), "{out}");
    assert!(out.contains(&format!("TRANSFERS 3 {}", 3 * (4 << 20))), "{out}");
    assert!(out.contains("DRIVER OK"), "{out}");
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn missing_image_fails_the_job_with_its_path_and_drains_no_node() {
    let dir = workdir(user_a(), "missing");
    let job = sbatch(user_a(), &dir, &["-N2", "--syndeo=/nonexistent/ray-image"], SCRIPT_RAN);
    job.assert_refused(Duration::from_secs(120), "image /nonexistent/ray-image does not exist");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    assert!(leftovers(job.id, user_a()).is_empty(), "{:?}", leftovers(job.id, user_a()));
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn srun_without_syndeo_in_a_syndeo_job_runs_on_the_host_with_ray_address() {
    let image = image();
    let dir = workdir(user_a(), "hoststep");
    let script = "#!/bin/bash\nsrun -N1 -n1 sh -c 'echo STEP_RAY=$RAY_ADDRESS; test -x /usr/bin/sbatch && echo ON_HOST'\nsrun --syndeo -N1 -n1 sh -c 'test -x /usr/bin/sbatch || echo IN_IMAGE'\n";
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    let out = job.output();
    assert!(out.contains(&format!("STEP_RAY={}.", bridge_prefix())), "{out}");
    // sbatch exists on the host but not in the image.
    assert!(out.contains("ON_HOST"), "plain srun ran in the image: {out}");
    assert!(out.contains("IN_IMAGE"), "srun --syndeo ran on the host: {out}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn syndeo_cli_reports_status_runs_in_the_image_and_shows_any_nodes_logs() {
    let image = image();
    let dir = workdir(user_a(), "cli");
    let script = r#"#!/bin/bash
syndeo status
syndeo status --json | python3 -c 'import json, sys; d = json.load(sys.stdin); print("JSON", d["state"], len(d["ready_nodes"]), d["head"])'
syndeo wait --timeout 10 && echo WAIT_OK
syndeo exec sh -c 'test -x /usr/bin/sbatch || echo EXEC_IN_IMAGE'
syndeo logs | grep -q "agent started" && echo LOGS_HERE
syndeo logs node2 | grep -q "node=node2" && echo LOGS_NODE2
"#;
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    assert!(out.contains("ready") && out.contains("head:        node1"), "{}", job.output());
    assert!(out.contains("JSON ready 2 node1"), "{}", job.output());
    for word in ["WAIT_OK", "EXEC_IN_IMAGE", "LOGS_HERE", "LOGS_NODE2"] {
        assert!(out.contains(word), "{word} missing: {}", job.output());
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_gets_the_jobs_cpus_and_memory_on_each_node_not_the_hosts() {
    let image = image();
    let dir = workdir(user_a(), "resources");
    let script = r#"#!/bin/bash
srun --syndeo -N1 -n1 python3 -c '
import ray
ray.init()
r = ray.cluster_resources()
print("RESOURCES", int(r["CPU"]), int(r["memory"]) >> 20, int(r["object_store_memory"]) >> 20)
'
"#;
    let job = sbatch(user_a(), &dir, &["-N3", "--mem=1500M", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    // 1 CPU and 1500 MiB per node: object store a third (500 MiB), Ray's memory the rest.
    assert!(job.stdout().contains("RESOURCES 3 3000 1500"), "{}", job.output());
}

/// The head hands the workers its GCS's address as soon as the GCS listens,
/// before its own `ray start` returns, so that the workers' start overlaps
/// the rest of the head's. Ray's GCS (gRPC on every address) listens
/// dual-stack on `[::]:port`, which only the kernel's IPv6 table shows: the
/// head must see it there (`ports::own_listener`).
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_head_hands_out_the_gcs_address_once_the_gcs_listens_before_its_ray_start_returns() {
    let image = image();
    let dir = workdir(user_a(), "gcs-early");
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/bash\necho READY\n");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let kept = dir.join(format!("syndeo-{}", job.id));
    let logs: Vec<String> =
        nodes().iter().map(|n| std::fs::read_to_string(kept.join(n).join("agent.log")).unwrap_or_default()).collect();
    let head =
        logs.iter().find(|l| l.contains("this node is the head")).unwrap_or_else(|| panic!("no head: {logs:#?}"));
    let (up, started) = (head.find("workers may start"), head.find("Ray head started in"));
    assert!(started.is_some(), "{head}");
    assert!(
        up.is_some() && up < started,
        "the GCS's address went out only when the head's ray start returned:\n{head}"
    );
}
