//! Security of the agents' mesh against another user on the same nodes and
//! on the network, with the attacks run for real: user B's jobs squat ports
//! and flood A's head, and a recording of A's mesh traffic is replayed by B.
//! A's cluster must form, capture nothing, and serve nothing to them.
use std::time::Duration;

use syndeo_tests::*;

/// A's driver: every node alive, a task on each.
const DRIVER: &str = r#"#!/bin/bash
echo "TOKEN=$RAY_AUTH_TOKEN"
echo "ADDRESS=$RAY_ADDRESS"
srun --syndeo -N1 -n1 python3 -c '
import ray, socket
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
def host():
    return socket.gethostname()
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
hosts = ray.get([ray.remote(host).options(scheduling_strategy=On(n, soft=False)).remote() for n in alive])
print("HOSTS", ",".join(sorted(hosts)))
'
"#;

fn a_job_on_three_nodes(name: &str) -> Job {
    let image = image();
    let dir = workdir(user_a(), name);
    sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], DRIVER)
}

fn assert_a_worked(a: &Job) {
    assert_eq!(a.wait(Duration::from_secs(300)), "COMPLETED", "{}", a.output());
    assert!(a.stdout().contains("HOSTS node1,node2,node3"), "{}", a.output());
    let left = leftovers(a.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", a.id);
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// B holds every predictable port on node1 (A's head) and node2 (a worker)
/// before A's job starts: every unprivileged port outside the kernel's
/// ephemeral range (all of ray_ports with it), Ray's default ports and
/// syndeo's former mesh range. A's agents meet on a privileged port root bound
/// for them, and with ray_ports all held, Ray's ports are the kernel's picks:
/// A's cluster forms, and not one connection reaches B.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn squatting_every_predictable_port_on_the_head_and_a_worker_captures_nothing_and_the_cluster_forms() {
    let dir_b = workdir(user_b(), "squatter");
    attack_script(user_b(), &dir_b, "squat.py");
    let script =
        "#!/bin/bash\nsrun -N2 --ntasks-per-node=1 -w node1,node2 bash -c 'python3 squat.py $(hostname -i) 600'\n";
    let b = sbatch(user_b(), &dir_b, &["-N2", "-w", "node1,node2"], script);
    let _cancel = CancelOnDrop(vec![b.id]);
    let squatting = b.wait_lines("SQUATTING ", 2, Duration::from_secs(120));
    for n in &squatting {
        assert!(n.parse::<usize>().unwrap() > 30000, "B holds only {n} ports");
    }

    let a = a_job_on_three_nodes("squatted");
    let state = a.wait(Duration::from_secs(300));
    run(&["scancel", "--signal=TERM", &b.id.to_string()]);
    let accepted = b.wait_lines("ACCEPTED ", 2, Duration::from_secs(60));
    let received = b.wait_lines("RECEIVED ", 2, Duration::from_secs(10));
    b.wait(Duration::from_secs(120));

    assert_eq!(state, "COMPLETED", "{}", a.output());
    assert_eq!(accepted, ["0", "0"], "connections reached B's squatted ports");
    assert!(received.iter().all(|r| r.is_empty()), "B received: {received:?}");
    assert_a_worked(&a);
}

/// Issue 26's attack, with what users bring (an image with `ray[default]`:
/// the dashboard's agents and metrics listen on every node too): from before
/// A's job starts until it ends, B's jobs on all three nodes bind, on the
/// node's address, every port they see on another user's command line and
/// every port another user's listener lets go. A's ports are held from their
/// pick, so B goes for A's GCS port and gets it nowhere: A's cluster forms,
/// and not one connection of A's reaches B.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_port_thief_watching_ps_and_released_ports_on_every_node_gets_no_call_and_the_cluster_forms() {
    let dir_b = workdir(user_b(), "thief");
    attack_script(user_b(), &dir_b, "port_thief.py");
    let script = "#!/bin/bash\nsrun -N3 --ntasks-per-node=1 bash -c 'python3 port_thief.py $(hostname -i) 900'\n";
    let b = sbatch(user_b(), &dir_b, &["-N3"], script);
    let _cancel = CancelOnDrop(vec![b.id]);
    b.wait_lines("THIEF READY", 3, Duration::from_secs(120));

    let dir_a = workdir(user_a(), "robbed");
    let a = sbatch(user_a(), &dir_a, &["-N3", &format!("--syndeo={}", image_with_ray_default())], DRIVER);
    let state = a.wait(Duration::from_secs(300));
    run(&["scancel", "--signal=TERM", &b.id.to_string()]);
    let accepted = b.wait_lines("ACCEPTED ", 3, Duration::from_secs(60));
    let bearer = b.wait_lines("BEARER ", 3, Duration::from_secs(10));
    let tried = b.wait_lines("TRIED ", 3, Duration::from_secs(10));
    b.wait(Duration::from_secs(120));

    assert_eq!(state, "COMPLETED", "{}", a.output());
    let gcs_port = a.lines("ADDRESS=").first().and_then(|a| a.rsplit(':').next().map(str::to_string));
    let gcs_port = gcs_port.unwrap_or_else(|| panic!("no RAY_ADDRESS: {}", a.output()));
    assert!(
        tried.iter().all(|t| t.split(',').any(|p| p == gcs_port)),
        "every thief saw A's GCS port {gcs_port} and went for it: {tried:?}"
    );
    assert_eq!(accepted, ["0", "0", "0"], "connections reached B's stolen ports (bearer: {bearer:?})");
    assert_a_worked(&a);
}

/// While A's job starts, B's jobs on the two other nodes flood every
/// privileged port of node1 (where A's head listens): connections held
/// without a word, garbage, stalled TLS hellos, connect-and-drop, several
/// thousand a second. A's cluster forms on all three nodes anyway, and A's
/// head logged the refusals.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_flood_on_the_heads_mesh_ports_from_another_users_jobs_fails_nothing_of_the_job() {
    let dir_b = workdir(user_b(), "flooder");
    attack_script(user_b(), &dir_b, "flood.py");
    let script = format!(
        "#!/bin/bash\necho FLOODING\nsrun -N2 --ntasks-per-node=1 -w node2,node3 python3 flood.py {} 180 600-999\n",
        node_addr("node1")
    );
    let b = sbatch(user_b(), &dir_b, &["-N2", "-w", "node2,node3"], &script);
    let _cancel = CancelOnDrop(vec![b.id]);
    b.wait_line("FLOODING", Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(3));

    let a = a_job_on_three_nodes("flooded");
    let state = a.wait(Duration::from_secs(300));
    let kept = format!("/home/{user_a}/syndeo-tests/flooded/syndeo-{}/node1/agent.log", a.id, user_a = user_a());
    let log = std::fs::read_to_string(&kept).unwrap_or_else(|e| format!("({kept}: {e})"));
    run(&["scancel", &b.id.to_string()]);
    b.wait(Duration::from_secs(120));

    assert_eq!(state, "COMPLETED", "{}", a.output());
    assert!(
        log.contains("refused a connection that did not prove it is this job's agent"),
        "no refusal in A's head's log: {log}"
    );
    assert_a_worked(&a);
}

/// An attacker on the network (the test, as root) records every mesh
/// connection to A's head while A's cluster forms: none of it holds A's Ray
/// token or A's job secret. B then replays the longest recorded client side
/// to A's head: the handshake does not complete, A's head logs the refusal,
/// and A's cluster goes on.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_recorded_mesh_exchange_holds_no_secret_and_replayed_later_is_refused() {
    let capture_file = format!("{}/mesh-capture.jsonl", mc_state_dir());
    let _ = std::fs::remove_file(&capture_file);
    let capture = repo().join("tests/attacks/capture.py");
    let recorder = std::process::Command::new("python3")
        .args([capture.to_str().unwrap(), &format!("syn-{}", node_netns("node1")), "40", "600-999", &capture_file])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the recorder");
    std::thread::sleep(Duration::from_secs(1));
    let image = image();
    let dir_a = workdir(user_a(), "recorded");
    let hold = "#!/bin/bash\necho \"TOKEN=$RAY_AUTH_TOKEN\"\nfor i in $(seq 1200); do [ -e release ] && break; sleep 0.25; done\n\
                srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print(\"ALIVE\", len([n for n in ray.nodes() if n[\"Alive\"]]))'\n";
    let a = sbatch(user_a(), &dir_a, &["-N3", &format!("--syndeo={image}")], hold);
    let _cancel = CancelOnDrop(vec![a.id]);
    let token = a.wait_line("TOKEN=", Duration::from_secs(300));
    let secret = job_secret(a.id, "node1");
    let mesh = mesh_address(a.id, "node1");
    let recorded = recorder.wait_with_output().expect("the recorder ends");
    assert!(String::from_utf8_lossy(&recorded.stdout).contains("CAPTURED"), "the recorder failed");

    let lines = std::fs::read_to_string(&capture_file).unwrap();
    let conns: Vec<(String, String)> = lines
        .lines()
        .filter_map(|l| {
            let server = l.split("\"server\": \"").nth(1)?.split('"').next()?.to_string();
            let bytes = l.split("\"client_bytes\": \"").nth(1)?.split('"').next()?.to_string();
            Some((server, bytes))
        })
        .filter(|(server, bytes)| *server == mesh && !bytes.is_empty())
        .collect();
    assert!(conns.len() >= 2, "recorded {} mesh connections to {mesh}", conns.len());
    let as_hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for (_, bytes) in &conns {
        assert!(!bytes.contains(&as_hex(&token)), "A's Ray token crossed the wire in the clear");
        assert!(!bytes.contains(&as_hex(&secret)), "A's job secret crossed the wire");
    }

    let longest = conns.iter().max_by_key(|(_, b)| b.len()).unwrap().1.clone();
    let dir_b = workdir(user_b(), "replayer");
    attack_script(user_b(), &dir_b, "replay.py");
    let b = sbatch(
        user_b(),
        &dir_b,
        &["-N1", "-w", "node2"],
        &format!("#!/bin/bash\npython3 replay.py {mesh} {longest}\n"),
    );
    assert_eq!(b.wait(Duration::from_secs(120)), "COMPLETED", "{}", b.output());
    assert!(b.stdout().contains("REPLAY_CLOSED yes"), "{}", b.output());
    let log = text(&in_node("node1", &["cat", &format!("/run/syndeo/{}/agent.log", a.id)]));
    assert!(log.contains("refused a connection that did not prove it is this job's agent"), "{log}");

    write_file(user_a(), &dir_a.join("release"), "");
    assert_eq!(a.wait(Duration::from_secs(180)), "COMPLETED", "{}", a.output());
    assert!(a.stdout().contains("ALIVE 3"), "A's cluster did not survive the replay: {}", a.output());
    let left = leftovers(a.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", a.id);
}
