//! Soak: many sequential syndeo jobs, then several at once on the same nodes,
//! all succeed, and afterwards the nodes hold nothing of them: the test counts
//! the user's processes, syndeo's files and the listening ports on every node,
//! prints the counts, and compares them with the counts before.
//! SYNDEO_SOAK_JOBS sets the sequential count (default 50).
use std::time::Duration;

use syndeo_tests::*;

const SCRIPT: &str =
    "#!/bin/bash\nsrun -N3 --ntasks-per-node=1 sh -c 'test -n \"$RAY_ADDRESS\" && echo OK' | grep -c OK\n";

/// (user processes, files of the user under /tmp /dev/shm /run/syndeo, listening TCP sockets) per node.
fn counts() -> Vec<(String, usize, usize, usize)> {
    nodes()
        .into_iter()
        .map(|n| {
            let procs = user_processes(&n, USER_A).len();
            let files =
                text(&in_node(&n, &["find", "/tmp", "/dev/shm", "/run/syndeo", "-user", USER_A])).lines().count();
            let ports = text(&in_node(&n, &["ss", "-Hltn"])).lines().count();
            (n, procs, files, ports)
        })
        .collect()
}

fn print_counts(when: &str, c: &[(String, usize, usize, usize)]) {
    for (n, p, f, l) in c {
        println!("soak {when}: {n}: {p} processes of {USER_A}, {f} files of {USER_A}, {l} listening TCP ports");
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn many_sequential_then_concurrent_jobs_all_succeed_and_leave_the_nodes_as_they_were() {
    let image = image();
    let n: usize = std::env::var("SYNDEO_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let dir = workdir(USER_A, "soak");
    let before = counts();
    print_counts("before", &before);

    for i in 0..n {
        let job = sbatch(USER_A, &dir, &["-N3", &format!("--syndeo={image}")], SCRIPT);
        let state = job.wait(Duration::from_secs(300));
        assert_eq!(state, "COMPLETED", "sequential job {i} ({}): {}", job.id, job.output());
        assert_eq!(job.stdout().trim(), "3", "job {i}: {}", job.output());
    }
    let concurrent: Vec<Job> = (0..4)
        .map(|i| {
            let d = workdir(USER_A, &format!("soak-c{i}"));
            sbatch(USER_A, &d, &["-N3", &format!("--syndeo={image}")], SCRIPT)
        })
        .collect();
    for job in &concurrent {
        let state = job.wait(Duration::from_secs(600));
        assert_eq!(state, "COMPLETED", "concurrent job {}: {}", job.id, job.output());
        assert_eq!(job.stdout().trim(), "3", "{}", job.output());
    }

    let after = counts();
    print_counts("after", &after);
    println!("soak: {n} sequential and 4 concurrent syndeo jobs completed");
    assert_eq!(before, after, "the nodes hold something of the jobs");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}
