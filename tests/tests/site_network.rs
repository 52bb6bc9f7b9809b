//! The site's `network` (syndeo.toml): Ray on each node's second network,
//! the minicluster's eth1 (10.213.8.0/24, a fast fabric's stand-in), while
//! Slurm's NodeAddr and the agents' mesh stay on eth0; and a rule that
//! matches nothing fails the job with the node's addresses, draining nothing.
use std::time::Duration;

use syndeo_tests::*;

/// Ray's node addresses, then a 200 MB object made on node1 and read on node2.
const DRIVER: &str = r#"
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
nodes = sorted((n["NodeManagerHostname"], n["NodeManagerAddress"], n["NodeID"]) for n in ray.nodes() if n["Alive"])
print("ADDRESSES", ",".join(a for _, a, _ in nodes))
by_host = {h: i for h, _, i in nodes}

@ray.remote(num_cpus=0)
def make(n):
    return b"x" * n

@ray.remote(num_cpus=0)
def size(b):
    return len(b)

blob = make.options(scheduling_strategy=On(by_host["node1"], soft=False)).remote(200 << 20)
print("MOVED", ray.get(size.options(scheduling_strategy=On(by_host["node2"], soft=False)).remote(blob)))
"#;

/// Bytes received on `dev` in `node`'s network namespace (/proc/net/dev).
fn rx_bytes(node: &str, dev: &str) -> u64 {
    let o = in_node(node, &["cat", "/proc/net/dev"]);
    let t = text(&o);
    let line = t.lines().find(|l| l.trim_start().starts_with(&format!("{dev}:"))).unwrap_or_else(|| panic!("{t}"));
    line.split(':').nth(1).and_then(|r| r.split_whitespace().next()).and_then(|b| b.parse().ok()).unwrap()
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn with_the_second_network_chosen_ray_lists_its_addresses_and_a_200_mb_object_crosses_it_not_the_first() {
    let fabric = fabric_prefix();
    let _net = ConfigOverride::set("network", &format!("[\"{fabric}.0/24\"]"));
    let dir = workdir(user_a(), "fabric");
    write_file(user_a(), &dir.join("driver.py"), DRIVER);
    let script = "#!/bin/bash\necho RAY_ADDRESS=$RAY_ADDRESS\nsrun --syndeo -N1 -n1 python3 driver.py\n";
    let before = (rx_bytes("node2", "eth0"), rx_bytes("node2", "eth1"));
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={}", image())], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let after = (rx_bytes("node2", "eth0"), rx_bytes("node2", "eth1"));
    let out = job.output();
    assert!(out.contains(&format!("RAY_ADDRESS={fabric}.1")), "the head's GCS on the fabric: {out}");
    assert!(out.contains(&format!("ADDRESSES {fabric}.11,{fabric}.12,{fabric}.13")), "{out}");
    assert!(out.contains(&format!("MOVED {}", 200 << 20)), "{out}");
    let (eth0, eth1) = (after.0 - before.0, after.1 - before.1);
    assert!(eth1 >= 200 << 20, "node2's eth1 received {eth1} bytes, less than the object");
    assert!(eth0 < 50 << 20, "node2's eth0 received {eth0} bytes: the object crossed the first network");
    assert_clean(&job, user_a());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_network_that_matches_no_address_fails_the_job_naming_the_node_and_its_addresses_and_drains_nothing() {
    let _net = ConfigOverride::set("network", r#"["192.168.77.0/24"]"#);
    let dir = workdir(user_a(), "no-fabric");
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={}", image())], SCRIPT_RAN);
    let out = job.assert_refused(Duration::from_secs(300), "no address matches network");
    assert!(out.contains("192.168.77.0/24") && out.contains(&format!("eth1 {}.1", fabric_prefix())), "{out}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    assert_clean(&job, user_a());
}
