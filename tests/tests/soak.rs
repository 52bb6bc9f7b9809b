//! Soak: many sequential syndeo jobs, then several at once on the same nodes,
//! then a mix of arrays, requeues and cancels at random moments; the jobs that
//! are left alone succeed, and afterwards the nodes hold nothing of any of
//! them: the test counts the user's processes, syndeo's files and the
//! listening ports on every node, prints the counts, and compares them with
//! the counts before. SYNDEO_SOAK_JOBS sets the sequential count (default 50);
//! SYNDEO_SOAK_SEED the random moments' seed (printed).
use std::time::Duration;

use syndeo_tests::*;

const SCRIPT: &str =
    "#!/bin/bash\nsrun -N3 --ntasks-per-node=1 sh -c 'test -n \"$RAY_ADDRESS\" && echo OK' | grep -c OK\n";

/// (user processes, files of the user under /tmp /dev/shm /run/syndeo, listening TCP sockets) per node.
fn counts() -> Vec<(String, usize, usize, usize)> {
    nodes()
        .into_iter()
        .map(|n| {
            let procs = user_processes(&n, user_a()).len();
            let files =
                text(&in_node(&n, &["find", "/tmp", "/dev/shm", "/run/syndeo", "-user", user_a()])).lines().count();
            let ports = text(&in_node(&n, &["ss", "-Hltn"])).lines().count();
            (n, procs, files, ports)
        })
        .collect()
}

fn print_counts(when: &str, c: &[(String, usize, usize, usize)]) {
    for (n, p, f, l) in c {
        println!(
            "soak {when}: {n}: {p} processes of {user_a}, {f} files of {user_a}, {l} listening TCP ports",
            user_a = user_a()
        );
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn many_sequential_then_concurrent_jobs_all_succeed_and_leave_the_nodes_as_they_were() {
    let image = image();
    let n: usize = std::env::var("SYNDEO_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let dir = workdir(user_a(), "soak");
    let before = counts();
    print_counts("before", &before);

    for i in 0..n {
        let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], SCRIPT);
        let state = job.wait(Duration::from_secs(300));
        assert_eq!(state, "COMPLETED", "sequential job {i} ({}): {}", job.id, job.output());
        assert_eq!(job.stdout().trim(), "3", "job {i}: {}", job.output());
    }
    let concurrent: Vec<Job> = (0..4)
        .map(|i| {
            let d = workdir(user_a(), &format!("soak-c{i}"));
            sbatch(user_a(), &d, &["-N3", &format!("--syndeo={image}")], SCRIPT)
        })
        .collect();
    for job in &concurrent {
        let state = job.wait(Duration::from_secs(600));
        assert_eq!(state, "COMPLETED", "concurrent job {}: {}", job.id, job.output());
        assert_eq!(job.stdout().trim(), "3", "{}", job.output());
    }

    mixed(&image);

    let after = counts();
    print_counts("after", &after);
    println!("soak: {n} sequential and 4 concurrent syndeo jobs completed");
    assert_eq!(before, after, "the nodes hold something of the jobs");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// A small linear congruential generator: the moments of the mixed phase,
/// from a printed seed (so a failing run can be repeated).
struct Moments(u64);

impl Moments {
    fn next_secs(&mut self, max: f64) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * max
    }
}

/// An array of three, a job requeued and one cancelled at random moments
/// (before, during or after their cluster's start), and a plain job beside.
fn mixed(image: &str) {
    let seed = std::env::var("SYNDEO_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs());
    println!("soak: mixed phase, seed {seed}");
    let mut moments = Moments(seed);
    let dir = workdir(user_a(), "soak-mixed");
    let syndeo = format!("--syndeo={image}");
    write_file(user_a(), &dir.join("array.sh"), &SCRIPT.replace("srun -N3", "srun -N1"));
    let o =
        as_user(user_a(), &dir, &["sbatch", "--parsable", "--array=1-3", "-N1", "-o", "array-%a", &syndeo, "array.sh"]);
    assert!(o.status.success(), "{}", text(&o));
    let array: u32 = String::from_utf8_lossy(&o.stdout).trim().split(';').next().unwrap().parse().unwrap();
    let requeued = sbatch(
        user_a(),
        &workdir(user_a(), "soak-requeued"),
        &["-N2", "--open-mode=append", &syndeo],
        "#!/bin/bash\nsleep 20\necho DONE\n",
    );
    let cancelled =
        sbatch(user_a(), &workdir(user_a(), "soak-cancelled"), &["-N2", &syndeo], "#!/bin/bash\nsleep 120\n");
    let plain = sbatch(user_a(), &workdir(user_a(), "soak-plain"), &["-N3", &syndeo], SCRIPT);
    let (t_requeue, t_cancel) = (moments.next_secs(12.0), moments.next_secs(12.0));
    println!("soak: requeue job {} at {t_requeue:.1} s, cancel job {} at {t_cancel:.1} s", requeued.id, cancelled.id);
    let t0 = std::time::Instant::now();
    let mut actions = vec![(t_requeue, "requeue", requeued.id), (t_cancel, "cancel", cancelled.id)];
    actions.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (at, what, id) in actions {
        std::thread::sleep(Duration::from_secs_f64(at).saturating_sub(t0.elapsed()));
        let argv: Vec<String> = match what {
            "requeue" => vec!["scontrol".into(), "requeue".into(), id.to_string()],
            _ => vec!["scancel".into(), id.to_string()],
        };
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        run(&refs);
    }
    assert_eq!(requeued.wait(Duration::from_secs(600)), "COMPLETED", "{}", requeued.output());
    assert!(requeued.stdout().contains("DONE"), "{}", requeued.output());
    cancelled.wait(Duration::from_secs(300));
    assert_eq!(plain.wait(Duration::from_secs(600)), "COMPLETED", "{}", plain.output());
    let t = std::time::Instant::now();
    while !text(&run(&["squeue", "-h", "-j", &array.to_string()])).trim().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(600), "the array did not finish");
        std::thread::sleep(Duration::from_secs(1));
    }
    for task in 1..=3 {
        let out = std::fs::read_to_string(dir.join(format!("array-{task}"))).unwrap_or_default();
        assert_eq!(out.trim(), "1", "array task {task}: {out}");
    }
    // Every epilog has run (a job's .jobs entry goes last).
    std::thread::sleep(Duration::from_secs(3));
}
