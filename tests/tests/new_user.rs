//! What a new user does first, on a fresh cluster: the first step sees a
//! cluster that is truly ready; the CLI works in the shell `salloc --syndeo`
//! opens; logs outlive the job; the dashboard is reachable the way `syndeo
//! status` says and `ray job submit` works with the job's token; the demo's
//! tasks run on every node.
use std::time::Duration;

use syndeo_tests::*;

/// The job's very first step: `ray status` lists every node as active, a
/// wave of SPREAD tasks reaches every node, and a STRICT_SPREAD placement
/// group of one bundle per node is placed at once.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_first_step_finds_every_node_active_in_ray_status_a_strict_spread_group_placed_and_spread_tasks_on_all() {
    let image = image();
    let dir = workdir(user_a(), "truly-ready");
    write_file(user_a(), &dir.join("first_step.py"), FIRST_STEP);
    let script = r#"#!/bin/bash
srun --syndeo -N1 -n1 bash -c 'ray status 2>&1 | sed "s/^/STATUS /"; python3 first_step.py'
"#;
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    let status: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("STATUS ")).collect();
    let active: Vec<&&str> = status
        .iter()
        .skip_while(|l| !l.trim_start().starts_with("Active:"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    let active_nodes: usize = active.iter().filter_map(|l| l.split_whitespace().next()?.parse::<usize>().ok()).sum();
    assert_eq!(active_nodes, 3, "ray status right after ready:\n{}", status.join("\n"));
    assert!(out.contains("PG_PLACED True"), "{}", job.output());
    let spread = out.lines().find_map(|l| l.strip_prefix("SPREAD ")).unwrap_or("");
    for node in ["node1", "node2", "node3"] {
        assert!(spread.contains(&format!("'{node}'")), "the first SPREAD wave missed {node}: {spread}");
    }
}

/// The first step's driver. The wave comes first: the head's raylet must
/// know every node from the start. Its three tasks each hold a whole CPU (a
/// node has one) until all three are running at once, so they can only
/// finish on three nodes, however long a node takes to start its first
/// worker: tasks that merely finished fast could all run, one after another,
/// on the one worker the head's node had warm: nine 0.3 s tasks ran 5, 2 and
/// 2 on the three nodes at load average 12, and all nine on node1 twice in
/// CI, which says nothing of readiness. A raylet that does not learn of a
/// node keeps the third task queued behind the other two; they give up
/// waiting after 60 s, and the wave misses that node. The group comes after
/// the wave, as the view of the others may still show their CPUs held by it.
const FIRST_STEP: &str = r#"
import collections, socket, time, ray
from ray.util.placement_group import placement_group
ray.init()

@ray.remote(num_cpus=0)
class Meeting:
    def __init__(self, n, limit):
        self.here, self.n, self.end = set(), n, time.time() + limit
    def arrive(self, who):
        self.here.add(who)
    def complete(self):
        return len(self.here) >= self.n or time.time() > self.end

@ray.remote(num_cpus=1)
def host(meeting, i):
    ray.get(meeting.arrive.remote(i))
    while not ray.get(meeting.complete.remote()):
        time.sleep(0.05)
    return socket.gethostname()

meeting = Meeting.remote(3, 60)
hosts = collections.Counter(ray.get([host.options(scheduling_strategy="SPREAD").remote(meeting, i) for i in range(3)]))
print("SPREAD", sorted(hosts.items()))
pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
print("PG_PLACED", pg.wait(timeout_seconds=10))
"#;

/// In the shell `salloc --syndeo` opens (outside any step): `syndeo status`,
/// `syndeo wait`, `syndeo logs NODE` and `eval "$(syndeo env)"` work; a
/// plain `srun` runs on the host, `srun --syndeo` in the image.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn in_the_salloc_shell_the_cli_works_plain_srun_runs_on_the_host_and_srun_syndeo_in_the_image() {
    let image = image();
    let dir = workdir(user_a(), "salloc-shell");
    let shell = r#"
set -u
syndeo wait --timeout 300 && echo WAITED
syndeo status | sed 's/^/STATUS /'
syndeo logs node2 | grep -c 'agent started' | sed 's/^/LOGS_NODE2 /'
eval "$(syndeo env)"
echo "ENV_ADDRESS=$RAY_ADDRESS TOKEN_LEN=${#RAY_AUTH_TOKEN}"
srun -N1 -n1 sh -c 'test -x /usr/local/bin/ray && echo PLAIN_IN_IMAGE || echo PLAIN_ON_HOST'
srun --syndeo -N1 -n1 sh -c 'test -x /usr/local/bin/ray && echo SYNDEO_IN_IMAGE || echo SYNDEO_ON_HOST'
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("ALIVE", len([n for n in ray.nodes() if n["Alive"]]))'
"#;
    let o = as_user(user_a(), &dir, &["salloc", "-N2", &format!("--syndeo={image}"), "bash", "-c", shell]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("WAITED"), "{out}");
    assert!(out.contains("STATUS job ") && out.contains(": ready"), "{out}");
    assert!(out.contains("LOGS_NODE2 1"), "{out}");
    let address = out.lines().find_map(|l| l.strip_prefix("ENV_ADDRESS=")).unwrap_or("");
    assert!(address.starts_with(&format!("{}.", bridge_prefix())) && address.contains("TOKEN_LEN=64"), "{out}");
    assert!(out.contains("PLAIN_ON_HOST") && !out.contains("PLAIN_IN_IMAGE"), "{out}");
    assert!(out.contains("SYNDEO_IN_IMAGE") && out.contains("ALIVE 2"), "{out}");
}

/// When the job ends, each node's agent and Ray logs are in the work
/// directory, the user's; `syndeo logs --job N NODE` shows them; with
/// keep_logs = false nothing is kept.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn logs_outlive_the_job_in_its_work_directory_and_keep_logs_false_keeps_none() {
    let image = image();
    let dir = workdir(user_a(), "kept-logs");
    let job =
        sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], "#!/bin/bash\nsrun --syndeo -N1 -n1 true\n");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let kept = dir.join(format!("syndeo-{}", job.id));
    let (uid, _) = user_ids(user_a());
    for node in ["node1", "node2"] {
        let agent_log = kept.join(node).join("agent.log");
        let meta = std::fs::metadata(&agent_log).unwrap_or_else(|e| {
            // What the epilog said of the copy on that node (a deadline, an error).
            let said: Vec<String> =
                slurmd_log(node).lines().filter(|l| l.contains(&job.id.to_string())).map(str::to_string).collect();
            panic!("{}: {e}; {node}'s slurmd log of the job: {said:#?}", agent_log.display())
        });
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), uid, "{} is not the user's", agent_log.display());
        assert!(kept.join(node).join("ray").is_dir(), "no Ray logs of {node}");
    }
    let o = as_user(user_a(), &dir, &["syndeo", "logs", "--job", &job.id.to_string(), "node2"]);
    let shown = text(&o);
    assert!(o.status.success() && shown.contains("node2/agent.log") && shown.contains("agent started"), "{shown}");
    assert!(!shown.contains("node1/agent.log"), "{shown}");

    let _off = ConfigOverride::set("keep_logs", "false");
    let dir = workdir(user_a(), "no-kept-logs");
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={image}")], "#!/bin/bash\ntrue\n");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert!(!dir.join(format!("syndeo-{}", job.id)).exists(), "logs were kept with keep_logs = false");
}

/// With the dashboard on (and Ray's dashboard in the image): `syndeo status`
/// prints its URL and an `ssh -L` line through the submit host; `ray job
/// submit` to it works with the job's token and is refused without it.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn with_the_dashboard_on_status_prints_the_tunnel_and_ray_job_submit_works_with_the_jobs_token_only() {
    let image = image_with_ray_default();
    let _on = ConfigOverride::set("dashboard", "true");
    let dir = workdir(user_a(), "dashboard");
    let script = r#"#!/bin/bash
syndeo status | sed 's/^/STATUS /'
srun --syndeo -N1 -n1 ray job submit --address "$SYNDEO_DASHBOARD_URL" -- python3 -c 'print("SUBMITTED", 6 * 7)' 2>&1 | tail -5 | sed 's/^/WITH_TOKEN /'
srun --syndeo -N1 -n1 env -u RAY_AUTH_TOKEN RAY_AUTH_MODE=token ray job submit --address "$SYNDEO_DASHBOARD_URL" -- true > no-token.out 2>&1
echo "NO_TOKEN_EXIT=$?"
"#;
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    let url = out.lines().find_map(|l| l.strip_prefix("STATUS dashboard:   ")).unwrap_or("").trim().to_string();
    let hostport = url.strip_prefix("http://").unwrap_or_else(|| panic!("no dashboard URL: {}", job.output()));
    let port = hostport.rsplit(':').next().unwrap();
    assert!(out.contains(&format!("ssh -N -L {port}:{hostport} ")), "{}", job.output());
    assert!(out.contains("WITH_TOKEN SUBMITTED 42"), "{}", job.output());
    let no_token = std::fs::read_to_string(dir.join("no-token.out")).unwrap_or_default();
    assert!(!out.contains("NO_TOKEN_EXIT=0") && !no_token.contains("SUBMITTED"), "{}\n{no_token}", job.output());
}

/// The demo's job (demo/job.sh, demo/pi.py) on three nodes prints tasks on
/// every node, as the README shows.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_demo_runs_its_tasks_on_every_node_as_the_readme_shows() {
    let image = image();
    let dir = workdir(user_a(), "demo");
    let pi = std::fs::read_to_string(repo().join("demo/pi.py")).unwrap();
    write_file(user_a(), &dir.join("pi.py"), &pi);
    let script = std::fs::read_to_string(repo().join("demo/job.sh")).unwrap();
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], &script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("from tasks on node1, node2, node3"), "{}", job.output());
}
