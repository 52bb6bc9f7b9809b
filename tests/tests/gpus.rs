//! GPUs: the GPUs Slurm allocates to a syndeo job on each node (GRES, on the
//! minicluster's stand-in devices) go to that node's Ray (`--num-gpus`,
//! CUDA_VISIBLE_DEVICES) and into its container (device binds).
use std::time::Duration;

use syndeo_tests::*;

/// Counts the cluster's GPUs, then runs one 1-GPU task pinned to each node
/// and prints the node and the CUDA_VISIBLE_DEVICES Ray gave the task.
const SCRIPT: &str = r#"#!/bin/bash
echo READY $SYNDEO_NODES
srun --syndeo -N1 -n1 python3 -c '
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
print("GPUS", int(ray.cluster_resources().get("GPU", 0)))
@ray.remote(num_gpus=1)
def where():
    import os, socket
    return socket.gethostname() + "=" + os.environ.get("CUDA_VISIBLE_DEVICES", "")
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
print("TASKS", " ".join(sorted(ray.get([where.options(scheduling_strategy=On(n, soft=False)).remote() for n in nodes]))))
'
for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_gpus_slurm_allocates_on_each_node_are_the_ones_ray_sees_and_the_container_gets() {
    let image = image();
    let dir = workdir(USER_A, "gpus");
    // Another user's job holds GPU 0 on every node, so the syndeo job gets
    // GPU 1: what Ray sees must follow Slurm's allocation, not count from 0.
    // (Another user's, so that its processes are not counted as A's leftovers.)
    let holder_dir = workdir(USER_B, "gpus-holder");
    let holder = sbatch(USER_B, &holder_dir, &["-N3", "--gres=gpu:1"], "#!/bin/sh\nsleep 600\n");
    let _cancel = CancelOnDrop(vec![holder.id]);
    let t = std::time::Instant::now();
    while holder.field("JobState").as_deref() != Some("RUNNING") {
        assert!(t.elapsed() < Duration::from_secs(60), "the GPU holder job did not start");
        std::thread::sleep(Duration::from_millis(250));
    }
    let job = sbatch(USER_A, &dir, &["-N3", "--gres=gpu:1", &format!("--syndeo={image}")], SCRIPT);
    job.wait_line("TASKS ", Duration::from_secs(180));
    let out = job.stdout();
    assert!(out.contains("GPUS 3"), "{}", job.output());
    assert!(out.contains("TASKS node1=1 node2=1 node3=1"), "{}", job.output());
    for node in ["node1", "node2", "node3"] {
        let bwrap = job_process(job.id, node, "/usr/bin/bwrap").expect("the Ray container");
        let argv = proc_cmdline(bwrap);
        assert!(argv.contains("--dev-bind-try /dev/nvidia1 /dev/nvidia1"), "{node}: {argv}");
        assert!(!argv.contains("/dev/nvidia0"), "{node} got the other job's GPU: {argv}");
        assert!(argv.contains("--setenv CUDA_VISIBLE_DEVICES 1 "), "{node}: {argv}");
    }
    write_file(USER_A, &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(120)), "COMPLETED", "{}", job.output());
    run(&["scancel", &holder.id.to_string()]);
    holder.wait(Duration::from_secs(120));
    let left = leftovers(job.id, USER_A);
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}
