//! GPUs: the GPUs Slurm allocates to a syndeo job on each node (GRES, on the
//! minicluster's stand-in devices) go to that node's Ray (`--num-gpus`,
//! CUDA_VISIBLE_DEVICES) and into its container: exactly their device files,
//! found from Slurm's gres.conf, whose minor numbers (7, 9) differ from
//! Slurm's indices (0, 1).
use std::time::Duration;

use syndeo_tests::*;

/// Counts the cluster's GPUs, then runs one 1-GPU task pinned to each node,
/// which prints the node, the CUDA_VISIBLE_DEVICES Ray gave it, the GPU
/// device files its container has, and what opening its own device gives
/// (no driver: ENXIO, once the device cgroup lets it through). The batch
/// script, on the host, tries the other job's GPU.
const SCRIPT: &str = r#"#!/bin/bash
echo READY $SYNDEO_NODES
python3 -c 'import errno, os
try:
    os.close(os.open("/dev/syndeo-gpu/nvidia7", os.O_RDWR))
    print("OTHER_GPU opened")
except OSError as e:
    print("OTHER_GPU", errno.errorcode[e.errno])'
srun --syndeo -N1 -n1 python3 -c '
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
print("GPUS", int(ray.cluster_resources().get("GPU", 0)))
@ray.remote(num_gpus=1)
def where():
    import errno, os, socket
    d = "/dev/syndeo-gpu"
    seen = sorted(os.listdir(d)) if os.path.isdir(d) else []
    try:
        os.close(os.open(d + "/nvidia9", os.O_RDWR))
        got = "opened"
    except OSError as e:
        got = errno.errorcode[e.errno]
    return "%s=%s:%s:%s" % (socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", ""), "+".join(seen), got)
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
print("TASKS", " ".join(sorted(ray.get([where.options(scheduling_strategy=On(n, soft=False)).remote() for n in nodes]))))
'
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_gpus_slurm_allocates_on_each_node_are_the_ones_ray_sees_and_the_only_devices_the_container_gets() {
    let image = image();
    let dir = workdir(user_a(), "gpus");
    // The minicluster's GPU nodes are node1 and node2 (node3 has none).
    // Another user's job holds GPU index 0 (nvidia7) on both, so the
    // syndeo job gets index 1, whose device is nvidia9, not /dev/nvidia1.
    // (Another user's, so that its processes are not counted as A's leftovers.)
    let holder_dir = workdir(user_b(), "gpus-holder");
    let holder = sbatch(user_b(), &holder_dir, &["-N2", "--gres=gpu:1"], "#!/bin/sh\nsleep 600\n");
    let _cancel = CancelOnDrop(vec![holder.id]);
    holder.wait_running(Duration::from_secs(60));
    let job = sbatch(user_a(), &dir, &["-N2", "--gres=gpu:1", &format!("--syndeo={image}")], SCRIPT);
    assert_eq!(job.wait(Duration::from_secs(240)), "COMPLETED", "{}", job.output());
    run(&["scancel", &holder.id.to_string()]);
    holder.wait(Duration::from_secs(120));
    let out = job.stdout();
    assert!(out.contains("GPUS 2"), "{}", job.output());
    let tasks = "TASKS node1=1:nvidia9:ENXIO node2=1:nvidia9:ENXIO";
    assert!(out.contains(tasks), "each container must have exactly the allocated GPU's device: {}", job.output());
    if cgroup_mode() {
        // ConstrainDevices: the job may not open the other job's GPU at all.
        assert!(out.contains("OTHER_GPU EPERM"), "{}", job.output());
    }
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}
