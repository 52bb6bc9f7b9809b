//! Reliability, second round: nothing a job leaves behind survives it, no
//! job can fill the node's filesystems through syndeo's directories, healthy
//! jobs log no errors, every job shape Slurm allows works (or is refused
//! clearly), and peers are reached at Slurm's NodeAddr.
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
    let dir = workdir(USER_A, "deep");
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
    let job = sbatch(USER_A, &dir, &["-N1", "-w", "node1", "--mem=3000M", &format!("--syndeo={image}")], script);
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
    assert_clean(&job, USER_A);
}

/// The job's runtime directory (in /run) and its /dev/shm are size-capped
/// tmpfs mounts: writing far more than their size fails with "no space" in
/// the job, and the node's /run and /dev/shm keep their free space.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_job_cannot_fill_run_or_dev_shm_through_its_directories() {
    let image = image();
    let dir = workdir(USER_A, "fill");
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
    let job = sbatch(USER_A, &dir, &["-N1", "-w", "node1", "--mem=3000M", &format!("--syndeo={image}")], script);
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
    assert_clean(&job, USER_A);
}

/// A healthy syndeo job (batch script, plain steps, `srun --syndeo` steps)
/// writes no error line about syndeo or SPANK to any slurmd's log.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_healthy_syndeo_job_writes_no_error_line_to_slurmds_log() {
    let image = image();
    let dir = workdir(USER_A, "no-errors");
    let before: Vec<usize> = nodes().iter().map(|n| slurmd_log(n).len()).collect();
    let script = "#!/bin/bash\nsrun -N2 true\nsrun --syndeo -N2 --ntasks-per-node=1 true\nsrun --syndeo -N1 -n1 python3 -c 'import ray; ray.init()'\n";
    let job = sbatch(USER_A, &dir, &["-N2", &format!("--syndeo={image}")], script);
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

/// A job array with --syndeo runs one cluster per task; the tasks run at
/// once on shared nodes, each with its own cluster.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_job_array_runs_one_cluster_per_task_concurrently_on_shared_nodes() {
    let image = image();
    let dir = workdir(USER_A, "array");
    write_file(USER_A, &dir.join("job.sh"), "#!/bin/bash\necho \"CLUSTER $SLURM_ARRAY_TASK_ID $RAY_ADDRESS $(date +%s.%N)\"\nsrun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print(\"ALIVE\", len(ray.nodes()))'\nsleep 10\necho \"END $(date +%s.%N)\"\n");
    let o = as_user(
        USER_A,
        &dir,
        &["sbatch", "--parsable", "--array=1-4", "-N1", "-o", "out-%a", &format!("--syndeo={image}"), "job.sh"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let id: u32 = String::from_utf8_lossy(&o.stdout).trim().split(';').next().unwrap().parse().unwrap();
    let t = std::time::Instant::now();
    loop {
        let q = text(&run(&["squeue", "-h", "-j", &id.to_string()]));
        if q.trim().is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(600), "the array did not finish: {q}");
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(Duration::from_secs(5));
    let mut addrs = Vec::new();
    let mut spans = Vec::new();
    for task in 1..=4 {
        let out = std::fs::read_to_string(dir.join(format!("out-{task}"))).unwrap_or_default();
        let c: Vec<&str> = out
            .lines()
            .find(|l| l.starts_with("CLUSTER "))
            .unwrap_or_else(|| panic!("task {task}: {out}"))
            .split(' ')
            .collect();
        assert!(out.contains("ALIVE 1"), "task {task}: {out}");
        addrs.push(c[2].to_string());
        let end: f64 = out.lines().find_map(|l| l.strip_prefix("END ")).unwrap_or("0").parse().unwrap();
        spans.push((c[3].parse::<f64>().unwrap(), end));
    }
    let mut unique = addrs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "tasks shared a cluster: {addrs:?}");
    let overlapping = spans.iter().enumerate().any(|(i, a)| spans.iter().skip(i + 1).any(|b| a.0 < b.1 && b.0 < a.1));
    assert!(overlapping, "no two array tasks ran at once: {spans:?}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// A heterogeneous job with --syndeo gets a clear refusal: its components
/// are separate allocations.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_heterogeneous_job_gets_a_clear_refusal_and_drains_nothing() {
    let image = image();
    let dir = workdir(USER_A, "hetjob");
    write_file(USER_A, &dir.join("job.sh"), "#!/bin/bash\necho SCRIPT RAN\n");
    let o = as_user(
        USER_A,
        &dir,
        &[
            "sbatch",
            "--parsable",
            "-o",
            "job.out",
            "-e",
            "job.err",
            "-N1",
            &format!("--syndeo={image}"),
            ":",
            "-N1",
            "job.sh",
        ],
    );
    let t = text(&o);
    if o.status.success() {
        let id: u32 = String::from_utf8_lossy(&o.stdout).trim().split(['+', ';']).next().unwrap().parse().unwrap();
        let job = Job { id, dir: dir.clone() };
        job.wait(Duration::from_secs(120));
        let out = job.output();
        assert!(out.contains("syndeo does not run a Ray cluster for a heterogeneous job"), "{out}");
        assert!(!out.contains("SCRIPT RAN"), "{out}");
    } else {
        assert!(t.contains("heterogeneous"), "{t}");
    }
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// --exclusive, --overcommit, a single node, many parallel `srun --syndeo`
/// steps, and `srun --overlap --syndeo` from salloc all work.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn exclusive_overcommit_single_node_parallel_steps_and_overlap_from_salloc_all_work() {
    let image = image();
    let syndeo = format!("--syndeo={image}");
    let step = "python3 -c 'import ray; ray.init(); print(\"ALIVE\", len([n for n in ray.nodes() if n[\"Alive\"]]))'";
    let shapes: [(&str, Vec<&str>, String); 3] = [
        ("exclusive", vec!["-N2", "--exclusive"], format!("#!/bin/bash\nsrun --syndeo -N1 -n1 {step}\n")),
        ("overcommit", vec!["-N1", "-n4", "--overcommit"], format!("#!/bin/bash\nsrun --syndeo -n1 {step}\n")),
        (
            "parallel",
            vec!["-N1"],
            format!("#!/bin/bash\nfor i in 1 2 3 4 5 6 7 8; do srun --syndeo -n1 --overlap {step} & done\nwait\n"),
        ),
    ];
    for (name, args, script) in shapes {
        let dir = workdir(USER_A, &format!("shape-{name}"));
        let mut a: Vec<&str> = args.clone();
        a.push(&syndeo);
        let job = sbatch(USER_A, &dir, &a, &script);
        assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{name}: {}", job.output());
        let want = if name == "exclusive" { "ALIVE 2" } else { "ALIVE 1" };
        let alive = job.stdout().matches(want).count();
        assert_eq!(alive, if name == "parallel" { 8 } else { 1 }, "{name}: {}", job.output());
        assert_clean(&job, USER_A);
    }
    let dir = workdir(USER_A, "shape-salloc");
    let o = as_user(
        USER_A,
        &dir,
        &[
            "salloc",
            "-N2",
            &syndeo,
            "srun",
            "--overlap",
            "--syndeo",
            "-N1",
            "-n1",
            "python3",
            "-c",
            "import ray; ray.init(); print('ALIVE', len([n for n in ray.nodes() if n['Alive']]))",
        ],
    );
    assert!(text(&o).contains("ALIVE 2"), "{}", text(&o));
}

/// With node3's name no longer resolvable (its /etc/hosts entry removed),
/// the agents reach it at Slurm's NodeAddr: the job's cluster forms.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn peers_are_reached_at_slurms_node_addr_even_when_a_node_name_does_not_resolve() {
    let image = image();
    let hosts = "/etc/hosts";
    let original = std::fs::read_to_string(hosts).unwrap();
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write("/etc/hosts", &self.0);
        }
    }
    let _restore = Restore(original.clone());
    let without: String =
        original.lines().filter(|l| !l.ends_with(" node3 # syndeo-minicluster")).map(|l| format!("{l}\n")).collect();
    std::fs::write(hosts, without).unwrap();
    assert!(!text(&run(&["getent", "hosts", "node3"])).contains("10.213"), "node3 still resolves");
    let dir = workdir(USER_A, "nodeaddr");
    let job = sbatch(USER_A, &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/bash\nsrun --syndeo -N1 -n1 -w node1 python3 -c 'import ray; ray.init(); print(\"ALIVE\", len([n for n in ray.nodes() if n[\"Alive\"]]))'\n");
    let state = job.wait(Duration::from_secs(300));
    drop(_restore);
    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("ALIVE 3"), "{}", job.output());
    assert_clean(&job, USER_A);
}
