//! What a job leaves on a node does not survive it: a huge tree of files in
//! its temp dir and /dev/shm goes with the epilog, a job cannot fill the
//! node's filesystems through syndeo's directories, and a healthy job writes
//! no error line to slurmd's log.
use std::time::Duration;

use syndeo_tests::*;

/// A Ray task makes a 30,000-deep directory tree and a million small files
/// in the job's temp dir, and another deep tree and 20,000 files in its
/// /dev/shm. The epilog removes all of it, says "node clean" only because it
/// is, and names nothing it could not remove.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_30000_deep_tree_and_a_million_files_are_all_removed_and_node_clean_is_true() {
    let image = image();
    let dir = workdir(user_a(), "deep");
    let script = r#"#!/bin/bash
srun --syndeo -N1 -n1 -w node1 python3 -c '
import os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
@ray.remote
def litter(base, depth, files):
    os.makedirs(base, exist_ok=True)
    os.chdir(base)
    for i in range(files):
        os.close(os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, 0o600))
    for _ in range(depth):
        os.mkdir("d")
        os.chdir("d")
    return base
here = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerHostname"] == "node1"][0]
on = dict(scheduling_strategy=On(here, soft=False))
temp = "/tmp/syndeo/" + os.environ["SLURM_JOB_ID"] + "/litter"
print("LITTERED", ray.get([litter.options(**on).remote(temp, 30000, 1000000),
                         litter.options(**on).remote("/dev/shm/litter", 30000, 20000)]))
'
"#;
    let job = sbatch(user_a(), &dir, &["-N1", "-w", "node1", "--mem=3000M", &format!("--syndeo={image}")], script);
    let state = job.wait(Duration::from_secs(900));
    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("LITTERED"), "{}", job.output());
    let log = slurmd_log("node1");
    assert!(log.contains(&format!("syndeo: epilog for job {}: node clean in", job.id)), "the epilog did not say clean");
    assert!(
        !log.lines().any(|l| (l.contains("not removed: ") && l.contains(&format!("/{}/", job.id)))
            || (l.contains(&format!("job {}:", job.id)) && l.contains("could not be removed"))),
        "the epilog named leftovers"
    );
    assert_clean(&job, user_a());
}

/// The job's runtime directory (in /run) and its /dev/shm are size-capped
/// tmpfs mounts: writing far more than their size fails with "no space" in
/// the job, and the node's /run and /dev/shm keep their free space.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_job_cannot_fill_run_or_dev_shm_through_its_directories() {
    let image = image();
    let dir = workdir(user_a(), "fill");
    let script = r#"#!/bin/bash
dd if=/dev/zero of=$SYNDEO_JOB_DIR/fill bs=1M count=500 2>&1 | tail -4
echo "RUN_FILL $(du -m $SYNDEO_JOB_DIR/fill | cut -f1)"
rm -f $SYNDEO_JOB_DIR/fill
srun --syndeo -N1 -n1 sh -c 'dd if=/dev/zero of=/dev/shm/fill bs=1M count=4000 2>&1 | tail -4; echo "SHM_FILL $(du -m /dev/shm/fill | cut -f1)"; rm -f /dev/shm/fill'
"#;
    let free = |node: &str, path: &str| {
        text(&in_node(node, &["df", "--output=avail", "-m", path]))
            .lines()
            .nth(1)
            .unwrap_or("0")
            .trim()
            .parse::<i64>()
            .unwrap_or(0)
    };
    let before = (free("node1", "/run/syndeo"), free("node1", "/dev/shm"));
    let job = sbatch(user_a(), &dir, &["-N1", "-w", "node1", "--mem=3000M", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    let mb = |key: &str| {
        out.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(u64::MAX)
    };
    assert!(mb("RUN_FILL ") <= 64, "the runtime dir took {} MiB: {}", mb("RUN_FILL "), job.output());
    assert!(mb("SHM_FILL ") <= 1000, "the job's /dev/shm took {} MiB: {}", mb("SHM_FILL "), job.output());
    assert!(out.to_lowercase().contains("no space left on device"), "{}", job.output());
    let after = (free("node1", "/run/syndeo"), free("node1", "/dev/shm"));
    assert!(
        (before.0 - after.0).abs() < 8 && (before.1 - after.1).abs() < 64,
        "free space changed: {before:?} -> {after:?}"
    );
    assert_clean(&job, user_a());
}

/// A healthy syndeo job (batch script, plain steps, `srun --syndeo` steps)
/// writes no error line about syndeo or SPANK to any slurmd's log.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_healthy_syndeo_job_writes_no_error_line_to_slurmds_log() {
    let image = image();
    let dir = workdir(user_a(), "no-errors");
    let before: Vec<usize> = nodes().iter().map(|n| slurmd_log(n).len()).collect();
    let script = "#!/bin/bash\nsrun -N2 true\nsrun --syndeo -N2 --ntasks-per-node=1 true\nsrun --syndeo -N1 -n1 python3 -c 'import ray; ray.init()'\n";
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    for (n, from) in nodes().iter().zip(before) {
        let log = slurmd_log(n);
        let errors: Vec<&str> = log[from.min(log.len())..]
            .lines()
            .filter(|l| l.contains("error") && (l.contains("spank") || l.contains("syndeo")))
            .collect();
        assert!(errors.is_empty(), "{n}: {errors:#?}");
    }
}
