//! Heterogeneous jobs (README, "Heterogeneous jobs"): `--syndeo` on the first
//! component gives one Ray cluster over every component's nodes, headed on
//! component 0's first node; each node's Ray has its own component's CPUs and
//! labels, steps of every component get the same RAY_ADDRESS, and a label
//! selector on the component places tasks there. `--syndeo` on a later
//! component only is refused at submit; a component's node lost at start
//! fails the whole job naming it; cancelling during start, and the end of a
//! job, leave nothing on any node of any component and drain nothing.
//!
//! The minicluster's partitions: `debug` (every node) and `fast` (node1,
//! node2). Components get nodes of their own (`-w`, or the partition).
use std::time::{Duration, Instant};

use syndeo_tests::*;

/// Submits a heterogeneous job; returns it (the leader's id) and the ids
/// of all its components, in order.
fn sbatch_het(dir: &std::path::Path, components: &[&[&str]], script: &str) -> (Job, Vec<u32>) {
    let args: Vec<&str> = components.join(&":");
    let job = sbatch(user_a(), dir, &args, script);
    let id = job.id;
    let listed = text(&run(&["squeue", "-h", "-t", "all", "-j", &id.to_string(), "-o", "%A"]));
    let mut ids: Vec<u32> = listed.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    ids.sort();
    assert_eq!(ids.len(), components.len(), "components of {id}: {listed}");
    (job, ids)
}

/// Waits until the job is over and every component's epilog has run on
/// every node; then nothing of any component is left and no node drained.
fn wait_and_assert_clean(job: &Job, ids: &[u32], limit: Duration) -> String {
    let state = job.wait(limit);
    let t = Instant::now();
    while ids.iter().any(|&id| nodes().iter().any(|n| node_path_exists(n, &state_dir(id)))) {
        assert!(t.elapsed() < Duration::from_secs(120), "epilogs of {ids:?} did not finish");
        std::thread::sleep(Duration::from_millis(250));
    }
    for &id in ids {
        assert_clean(&Job { id, dir: job.dir.clone() }, user_a());
    }
    state
}

/// A driver, run as a step of component 0 (on the head's node: the
/// minicluster's nodes share one PID namespace, where Ray's driver takes
/// every node's raylet for a local one and picks the head's), that prints each live node's
/// address, CPUs, memory (MiB) and `slurm/*` labels, then where tasks that select a
/// component ran.
const DRIVER: &str = r#"
import json, socket, ray
ray.init()
for n in ray.nodes():
    if n["Alive"]:
        labels = {k: v for k, v in n["Labels"].items() if k.startswith("slurm/")}
        mem = int(n["Resources"].get("memory", 0)) >> 20
        gpus = n["Resources"].get("GPU", 0)
        print("NODE", json.dumps([n["NodeManagerAddress"], n["Resources"].get("CPU"), mem, gpus, labels], sort_keys=True))
@ray.remote(num_cpus=0.1)
def host():
    return socket.gethostname()
for group in ["0", "1"]:
    sel = {"slurm/het-group": group}
    hosts = ray.get([host.options(label_selector=sel).remote() for _ in range(12)], timeout=120)
    print("GROUP", group, " ".join(sorted(set(hosts))))
hosts = ray.get([host.options(label_selector={"slurm/gpu-count": "!0"}).remote() for _ in range(12)], timeout=120)
print("GPU_NODES", " ".join(sorted(set(hosts))))
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_two_component_job_is_one_cluster_with_each_components_cpus_labels_and_address_in_every_step() {
    let image = image();
    let dir = workdir(user_a(), "het-one-cluster");
    let script = format!(
        "#!/bin/bash\n\
         echo BATCH $(hostname) $RAY_ADDRESS\n\
         srun --het-group=1 bash -c 'echo STEP1 $(hostname) $RAY_ADDRESS'\n\
         srun --het-group=1 --syndeo bash -c 'echo IMAGE1 $(hostname) $RAY_ADDRESS'\n\
         srun --het-group=0 --syndeo python3 -c '{DRIVER}'\n"
    );
    let syndeo = format!("--syndeo={image}");
    let (job, ids) = sbatch_het(
        &dir,
        &[
            &["-N1", "-p", "debug", "-w", "node3", "-c1", "--mem=900M", &syndeo],
            &["-N2", "-p", "fast", "-c2", "--mem=1500M", "--gres=gpu:1"],
        ],
        &script,
    );
    let state = wait_and_assert_clean(&job, &ids, Duration::from_secs(300));
    let out = job.output();
    assert_eq!(state, "COMPLETED", "{out}");
    // The batch script runs on component 0's first node, where the head is.
    let batch = job.lines("BATCH ");
    assert_eq!(batch.len(), 1, "{out}");
    let (host, address) = batch[0].split_once(' ').unwrap();
    assert_eq!(host, "node3", "{out}");
    assert!(address.starts_with(&format!("{}:", node_addr("node3"))), "the head is not node3: {out}");
    let mut steps = job.lines("STEP1 ");
    steps.sort();
    assert_eq!(steps, [format!("node1 {address}"), format!("node2 {address}")], "{out}");
    let mut in_image = job.lines("IMAGE1 ");
    in_image.sort();
    assert_eq!(in_image, steps, "srun --het-group=1 --syndeo: {out}");
    // One cluster of three nodes; each node's CPUs, memory (two thirds of its
    // component's --mem: the object store has the rest), GPUs and labels
    // from its own component.
    let mut seen = Vec::new();
    for line in job.lines("NODE ") {
        type Node = (String, f64, u64, f64, std::collections::BTreeMap<String, String>);
        let (addr, cpus, mem, gpus, labels): Node = serde_json::from_str(&line).expect("node json");
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let node = get("slurm/node");
        let slurm = (get("slurm/het-group"), get("slurm/partition"), get("slurm/gpu-count"));
        seen.push((node.clone(), addr == node_addr(&node), (cpus, mem, gpus), slurm));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let want = |n: &str, res: (f64, u64, f64), group: &str, part: &str, gpus: &str| {
        (n.to_string(), true, res, (group.to_string(), part.to_string(), gpus.to_string()))
    };
    assert_eq!(
        seen,
        [
            want("node1", (2.0, 1000, 1.0), "1", "fast", "1"),
            want("node2", (2.0, 1000, 1.0), "1", "fast", "1"),
            want("node3", (1.0, 600, 0.0), "0", "debug", "0")
        ],
        "{out}"
    );
    // Ray may put all of a selector's tasks on one node of the component.
    let groups = job.lines("GROUP ");
    assert_eq!(groups.len(), 2, "{out}");
    assert_eq!(groups[0], "0 node3", "tasks landed outside component 0: {out}");
    let hosts: Vec<&str> = groups[1].strip_prefix("1 ").unwrap_or("").split_whitespace().collect();
    assert!(!hosts.is_empty() && hosts.iter().all(|h| ["node1", "node2"].contains(h)), "outside component 1: {out}");
    let gpu_nodes = job.lines("GPU_NODES ");
    assert!(gpu_nodes.len() == 1 && !gpu_nodes[0].contains("node3"), "a GPU selector reached node3: {out}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn syndeo_on_a_later_component_only_is_refused_at_submit_naming_the_fix() {
    let image = image();
    let dir = workdir(user_a(), "het-later");
    write_file(user_a(), &dir.join("job.sh"), SCRIPT_RAN);
    let syndeo = format!("--syndeo={image}");
    let o = as_user(user_a(), &dir, &["sbatch", "-N1", ":", "-N1", &syndeo, "job.sh"]);
    let t = text(&o);
    assert!(!o.status.success(), "queued: {t}");
    assert!(t.contains("--syndeo is on component 1 of this heterogeneous job but not on its first"), "{t}");
    assert!(t.contains("before the first ':'"), "{t}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_component_node_lost_at_start_fails_the_whole_job_naming_it_and_drains_nothing() {
    let image = image();
    let dir = workdir(user_a(), "het-lost");
    let syndeo = format!("--syndeo={image}");
    let (job, ids) = {
        let _short = ConfigOverride::set("startup_timeout", "40");
        let (job, ids) = sbatch_het(&dir, &[&["-N1", "-w", "node1", &syndeo], &["-N2", "-w", "node[2-3]"]], SCRIPT_RAN);
        job.wait_for_agent(ids[1], "node3", Duration::from_secs(120));
        let _down = LinkDown::new("node3");
        // The batch script's step (component 0, on node1) learns it from the head.
        job.wait_stderr("could not start", Duration::from_secs(90));
        (job, ids)
    };
    let state = wait_and_assert_clean(&job, &ids, Duration::from_secs(240));
    let out = job.output();
    assert_ne!(state, "COMPLETED", "{out}");
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(out.contains("missing: [\"node3\"]"), "{out}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn scancel_during_start_leaves_nothing_of_any_component_on_any_node() {
    let image = image();
    let dir = workdir(user_a(), "het-scancel");
    let syndeo = format!("--syndeo={image}");
    let hold = "#!/bin/bash\necho READY $RAY_ADDRESS\nsleep 300\n";
    let (job, ids) = sbatch_het(&dir, &[&["-N1", "-w", "node1", &syndeo], &["-N2", "-w", "node[2-3]"]], hold);
    // Cancelled as soon as component 1's agent runs: the cluster cannot be
    // ready yet, and the batch step still waits for it in its SPANK hook.
    // There, Slurm's kill of component 0 waits for the step to run (up to
    // 2 x 60 s in slurmstepd's _wait_for_job_running; README): the job may
    // stay COMPLETING that long, and must end with nothing left.
    job.wait_for_agent(ids[1], "node2", Duration::from_secs(120));
    run(&["scancel", &job.id.to_string()]);
    let state = wait_and_assert_clean(&job, &ids, Duration::from_secs(300));
    assert_eq!(state, "CANCELLED", "{}", job.output());
}
