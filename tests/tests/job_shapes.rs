//! Every job shape Slurm allows works or is refused clearly: job arrays,
//! exclusive and overcommitted nodes, parallel steps,
//! overlapping steps from salloc; and peers are reached at Slurm's NodeAddr.
use std::time::Duration;

use syndeo_tests::*;

/// A job array with --syndeo runs one cluster per task; the tasks run at
/// once on shared nodes, each with its own cluster.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_job_array_runs_one_cluster_per_task_concurrently_on_shared_nodes() {
    let image = image();
    let dir = workdir(user_a(), "array");
    write_file(user_a(), &dir.join("job.sh"), "#!/bin/bash\necho \"CLUSTER $SLURM_ARRAY_TASK_ID $RAY_ADDRESS $(date +%s.%N)\"\nsrun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print(\"ALIVE\", len(ray.nodes()))'\nsleep 10\necho \"END $(date +%s.%N)\"\n");
    let o = as_user(
        user_a(),
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
        let dir = workdir(user_a(), &format!("shape-{name}"));
        let mut a: Vec<&str> = args.clone();
        a.push(&syndeo);
        let job = sbatch(user_a(), &dir, &a, &script);
        assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{name}: {}", job.output());
        let want = if name == "exclusive" { "ALIVE 2" } else { "ALIVE 1" };
        let alive = job.stdout().matches(want).count();
        assert_eq!(alive, if name == "parallel" { 8 } else { 1 }, "{name}: {}", job.output());
        assert_clean(&job, user_a());
    }
    let dir = workdir(user_a(), "shape-salloc");
    let o = as_user(
        user_a(),
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

/// With node3's name no longer resolvable on node1 and node2 (an /etc/hosts
/// without it bound over theirs, inside their mount namespaces; node3 still
/// knows itself), the agents reach it at Slurm's NodeAddr: the job's
/// cluster forms.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn peers_are_reached_at_slurms_node_addr_even_when_a_node_name_does_not_resolve() {
    let image = image();
    let hosts = std::fs::read_to_string(format!("{}/etc/hosts", root_prefix())).unwrap();
    let without: String =
        hosts.lines().filter(|l| !l.contains(" node3 # syndeo-minicluster")).map(|l| format!("{l}\n")).collect();
    let file = format!("{}/hosts-without-node3", mc_state_dir());
    std::fs::write(&file, without).unwrap();
    /// Takes the bound /etc/hosts off node1 and node2 again, whatever the test did.
    struct Unbind;
    impl Drop for Unbind {
        fn drop(&mut self) {
            for n in ["node1", "node2"] {
                in_node(n, &["umount", "/etc/hosts"]);
            }
        }
    }
    let _unbind = Unbind;
    for n in ["node1", "node2"] {
        let o = in_node(n, &["mount", "--bind", &file, "/etc/hosts"]);
        assert!(o.status.success(), "{n}: {}", text(&o));
        let seen = text(&in_node(n, &["getent", "hosts", "node3"]));
        assert!(!seen.contains(&bridge_prefix()), "node3 still resolves on {n}: {seen}");
    }
    let dir = workdir(user_a(), "nodeaddr");
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/bash\nsrun --syndeo -N1 -n1 -w node1 python3 -c 'import ray; ray.init(); print(\"ALIVE\", len([n for n in ray.nodes() if n[\"Alive\"]]))'\n");
    let state = job.wait(Duration::from_secs(300));
    drop(_unbind);
    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("ALIVE 3"), "{}", job.output());
    assert_clean(&job, user_a());
}
