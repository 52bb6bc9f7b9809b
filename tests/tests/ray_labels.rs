//! Ray node labels from Slurm, in a plain job (README, "Ray node labels"):
//! every node's labels say what Slurm says of it (name, partition, component
//! 0, features, GPU count and type), and a task with a label selector on a
//! feature runs only on the nodes Slurm gives that feature. The minicluster's
//! node1 and node2 are `cpu_fast`, in partition `fast` and have two stand-in
//! GPUs of type `standin` each; node3 is `bigmem` and has no GPU. Needs Ray
//! 2.49 or later (the default test image has 2.60).
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use syndeo_tests::*;

/// A batch script whose driver prints each live node's labels
/// (`LABELS <json>`), then runs `then` (more Python).
fn script(then: &str) -> String {
    format!(
        r#"#!/bin/bash
srun --syndeo -N1 -n1 python3 -c '
import json, socket, ray
ray.init()
for n in ray.nodes():
    if n["Alive"]:
        print("LABELS", json.dumps(n["Labels"], sort_keys=True))
{then}'
"#
    )
}

/// Where tasks that select a feature ran (`ON <feature> <host>...`).
const SELECT_FEATURES: &str = r#"@ray.remote
def host():
    return socket.gethostname()
for feature in ["cpu_fast", "bigmem"]:
    sel = {"slurm/feature." + feature: "true"}
    hosts = ray.get([host.options(label_selector=sel).remote() for _ in range(12)], timeout=120)
    print("ON", feature, " ".join(sorted(set(hosts))))
"#;

/// `slurm/*` labels of each node, by `slurm/node`.
fn labels_by_node(job: &Job) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for line in job.lines("LABELS ") {
        let all: BTreeMap<String, String> = serde_json::from_str(&line).expect("labels json");
        let ours: BTreeMap<String, String> = all.into_iter().filter(|(k, _)| k.starts_with("slurm/")).collect();
        let node = ours.get("slurm/node").cloned().unwrap_or_else(|| panic!("no slurm/node: {line}"));
        out.insert(node, ours);
    }
    out
}

/// What `scontrol show node -o NODE` says: (ActiveFeatures, GPU type of Gres=).
fn slurm_node(node: &str) -> (BTreeSet<String>, Option<String>) {
    let o = text(&run(&["scontrol", "show", "node", "-o", node]));
    let field = |k: &str| o.split_whitespace().find_map(|f| f.strip_prefix(k)).unwrap_or("").to_string();
    let active = field("ActiveFeatures=");
    let features = active.split(',').filter(|f| !f.is_empty() && *f != "(null)").map(String::from).collect();
    // Gres=gpu:standin:2 (a later release may add "(S:0)").
    let gres = field("Gres=");
    let parts: Vec<&str> = gres.strip_prefix("gpu:").unwrap_or("").split(':').collect();
    let kind = (parts.len() >= 2).then(|| parts[0].to_string());
    (features, kind)
}

/// Every node of the job carries Slurm's facts, exactly.
fn assert_labels_match_slurm(job: &Job, partition: &str, gpus: u32) {
    let labels = labels_by_node(job);
    let nodes = job.nodes();
    assert_eq!(labels.keys().cloned().collect::<Vec<_>>(), nodes, "{}", job.output());
    assert_eq!(job.field("Partition").as_deref(), Some(partition));
    for node in &nodes {
        let l = &labels[node];
        let (features, kind) = slurm_node(node);
        assert_eq!(l.get("slurm/partition").map(String::as_str), Some(partition), "{node}: {l:?}");
        assert_eq!(l.get("slurm/het-group").map(String::as_str), Some("0"), "{node}: {l:?}");
        assert_eq!(l.get("slurm/gpu-count"), Some(&gpus.to_string()), "{node}: {l:?}");
        let want_kind = if gpus > 0 { kind } else { None };
        assert_eq!(l.get("slurm/gpu-type").cloned(), want_kind, "{node}: {l:?}");
        let labelled: BTreeSet<String> = l
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("slurm/feature.").filter(|_| v == "true"))
            .map(String::from)
            .collect();
        assert!(!features.is_empty(), "{node}: the minicluster gives every node a feature");
        assert_eq!(labelled, features, "{node}: {l:?}");
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn each_nodes_labels_say_what_slurm_says_and_a_feature_selector_lands_only_where_slurm_put_the_feature() {
    let image = image();
    let dir = workdir(user_a(), "ray-labels");
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], &script(SELECT_FEATURES));
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert_labels_match_slurm(&job, "debug", 0);
    for feature in ["cpu_fast", "bigmem"] {
        let with: BTreeSet<String> = job.nodes().into_iter().filter(|n| slurm_node(n).0.contains(feature)).collect();
        let on = job.lines(&format!("ON {feature} "));
        assert_eq!(on.len(), 1, "{}", job.output());
        let ran: BTreeSet<String> = on[0].split_whitespace().map(String::from).collect();
        assert!(!ran.is_empty() && ran.is_subset(&with), "{feature}: tasks ran on {ran:?}, Slurm says {with:?}");
    }
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_job_on_the_gpu_partition_is_labelled_with_that_partition_and_the_type_and_count_of_its_gpus() {
    let image = image();
    let dir = workdir(user_a(), "ray-labels-fast");
    let job = sbatch(user_a(), &dir, &["-N2", "-p", "fast", "--gres=gpu:2", &format!("--syndeo={image}")], &script(""));
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert_labels_match_slurm(&job, "fast", 2);
    assert_clean(&job, user_a());
}
