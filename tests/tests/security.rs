//! Security and multi-tenancy on the minicluster, with two unprivileged users:
//! every cluster takes only its own token, every syndeo process is the job
//! user's with no capability and no_new_privs, two users' jobs on the same
//! nodes cannot reach each other, and hostile input is refused or harmless.
use std::time::Duration;

use syndeo_tests::*;

/// A's job: prints its cluster's address and token, holds the cluster until
/// the test creates `release`, then runs a driver on it.
const HOLDING_SCRIPT: &str = r#"#!/bin/bash
echo "ADDR=$RAY_ADDRESS"
echo "TOKEN=$RAY_AUTH_TOKEN"
for i in $(seq 1200); do [ -e release ] && break; sleep 0.25; done
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("OWN_NODES", len([n for n in ray.nodes() if n["Alive"]]))'
"#;

/// B's driver: tries A's cluster with B's own token, then with none.
const INTRUDER: &str = r#"
import os, sys, ray
addr = sys.argv[1]
for label, env in (("B_TOKEN", {}), ("NO_TOKEN", {"RAY_AUTH_TOKEN": None})):
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        ray.init(address=addr)
        print(label, "JOINED", len(ray.nodes()), flush=True)
        ray.shutdown()
    except Exception as e:
        print(label, "REFUSED", type(e).__name__, flush=True)
"#;

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn two_users_on_the_same_nodes_share_nothing_and_cannot_reach_each_other() {
    let image = image();
    let dir_a = workdir(USER_A, "tenant-a");
    let a = sbatch(USER_A, &dir_a, &["-N3", &format!("--syndeo={image}")], HOLDING_SCRIPT);
    let addr_a = a.wait_line("ADDR=", Duration::from_secs(300));
    let token_a = a.wait_line("TOKEN=", Duration::from_secs(10));
    assert!(token_a.len() >= 32, "A's job has no Ray token: {}", a.output());

    let dir_b = workdir(USER_B, "tenant-b");
    write_file(USER_B, &dir_b.join("intruder.py"), INTRUDER);
    let script_b = format!(
        r#"#!/bin/bash
echo "ADDR=$RAY_ADDRESS"
for p in /run/syndeo/{id} /run/syndeo/{id}/ray_token /run/syndeo/{id}/agent.sock /tmp/syndeo/{id} /dev/shm/syndeo/{id}; do
    if cat "$p" >/dev/null 2>&1 || ls "$p" >/dev/null 2>&1; then echo "READABLE $p"; else echo "DENIED $p"; fi
done
srun --syndeo -N1 -n1 timeout 150 python3 intruder.py {addr_a}
"#,
        id = a.id
    );
    let b = sbatch(USER_B, &dir_b, &["-N3", &format!("--syndeo={image}")], &script_b);
    let state_b = b.wait(Duration::from_secs(400));
    let out_b = b.output();

    // While A's cluster runs: its processes, and no secret on any command line.
    let procs = marked_processes(a.id);
    let cmdlines = all_cmdlines();
    write_file(USER_A, &dir_a.join("release"), "");
    let state_a = a.wait(Duration::from_secs(300));

    assert_eq!(state_b, "COMPLETED", "{out_b}");
    let addr_b = b.stdout().lines().find_map(|l| l.strip_prefix("ADDR=").map(str::to_string)).unwrap_or_default();
    assert!(addr_b.starts_with("10.213.7.") && addr_b != addr_a, "B's cluster must be its own: A {addr_a}, B {addr_b}");
    assert!(!out_b.contains("READABLE"), "B could read A's files: {out_b}");
    assert_eq!(out_b.matches("DENIED").count(), 5, "{out_b}");
    assert!(out_b.contains("B_TOKEN REFUSED"), "B joined A's cluster with its own token: {out_b}");
    assert!(out_b.contains("NO_TOKEN REFUSED"), "B joined A's cluster without a token: {out_b}");
    assert!(!out_b.contains("JOINED"), "{out_b}");
    assert!(b.stderr().contains("Authentication token is missing or incorrect"), "refused for another reason: {out_b}");

    assert_eq!(state_a, "COMPLETED", "{}", a.output());
    assert!(a.stdout().contains("OWN_NODES 3"), "A's own driver must still work: {}", a.output());

    let leaked: Vec<&(i32, String)> = cmdlines.iter().filter(|(_, c)| c.contains(&token_a)).collect();
    assert!(leaked.is_empty(), "A's Ray token is on a command line: {leaked:?}");

    let (uid_a, groups_a) = user_ids(USER_A);
    assert!(procs.len() >= 6, "expected agent, runtime and Ray processes on 3 nodes, found {procs:?}");
    for pid in procs {
        let what = proc_cmdline(pid);
        let Some(uid) = proc_status(pid, "Uid") else { continue }; // ended meanwhile
        assert!(uid.split_whitespace().all(|u| u == uid_a.to_string()), "{pid} {what}: Uid {uid}");
        assert_eq!(proc_status(pid, "CapEff").as_deref(), Some("0000000000000000"), "{pid} {what}");
        assert_eq!(proc_status(pid, "CapPrm").as_deref(), Some("0000000000000000"), "{pid} {what}");
        assert_eq!(proc_status(pid, "NoNewPrivs").as_deref(), Some("1"), "{pid} {what}");
        let groups = proc_status(pid, "Groups").unwrap_or_default();
        for g in groups.split_whitespace() {
            // Inside a user namespace unmapped groups show as the overflow gid.
            let g: u32 = g.parse().unwrap();
            assert!(groups_a.contains(&g) || g == 65534, "{pid} {what}: group {g} is not {USER_A}'s ({groups_a:?})");
        }
    }
    for job in [a.id, b.id] {
        let left = leftovers(job, if job == a.id { USER_A } else { USER_B });
        assert!(left.is_empty(), "job {job} left: {left:#?}");
    }
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn image_that_root_can_read_but_the_user_cannot_is_refused() {
    let image = image();
    let private = "/var/lib/syndeo-test-private";
    run(&["install", "-d", "-m", "0700", "-o", "root", private]);
    run(&["ln", "-sfn", &image, &format!("{private}/ray")]);
    let dir = workdir(USER_A, "private-image");
    let job = sbatch(USER_A, &dir, &["-N1", &format!("--syndeo={private}/ray")], "#!/bin/sh\necho SCRIPT RAN\n");
    let state = job.wait(Duration::from_secs(120));
    let out = job.output();
    assert_ne!(state, "COMPLETED", "{out}");
    assert!(!out.contains("SCRIPT RAN"), "{out}");
    assert!(out.contains(&format!("image {private}/ray is not readable by you")), "{out}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn shell_metacharacters_in_the_image_are_data_not_commands() {
    let dir = workdir(USER_A, "metachar");
    let canary = format!("/home/{USER_A}/syndeo-tests/PWNED");
    let _ = std::fs::remove_file(&canary);
    let value = format!("/nonexistent/a;touch {canary};$(touch {canary})`touch {canary}`|x&");
    let job = sbatch(USER_A, &dir, &["-N2", &format!("--syndeo={value}")], "#!/bin/sh\necho SCRIPT RAN\n");
    let state = job.wait(Duration::from_secs(120));
    let out = job.output();
    assert_ne!(state, "COMPLETED", "{out}");
    assert!(out.contains("does not exist"), "{out}");
    assert!(!std::path::Path::new(&canary).exists(), "a metacharacter in --syndeo ran a command");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn overlong_and_dotdot_images_are_refused_at_submit() {
    let dir = workdir(USER_A, "hostile-submit");
    write_file(USER_A, &dir.join("job.sh"), "#!/bin/sh\ntrue\n");
    let long = format!("--syndeo=/{}", "a".repeat(5000));
    for (arg, says) in [(long.as_str(), "the limit is 4096"), ("--syndeo=/shared/../etc/shadow", "`..` component")] {
        let o = as_user(USER_A, &dir, &["sbatch", "-N1", arg, "job.sh"]);
        assert!(!o.status.success(), "sbatch accepted {arg:.40}");
        assert!(text(&o).contains(says), "{}", text(&o));
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_users_link_squatting_the_temp_base_is_moved_aside_not_followed() {
    let image = image();
    let node = "node1";
    let trap = format!("/home/{USER_B}/trap");
    let _ = std::fs::remove_dir_all(&trap);
    run(&["install", "-d", "-o", USER_B, "-g", USER_B, &trap]);
    // No job runs now: as B, plant a link where root makes its temp base.
    in_node(node, &["rm", "-rf", "/tmp/syndeo"]);
    let o = in_node(node, &["runuser", "-u", USER_B, "--", "ln", "-s", &trap, "/tmp/syndeo"]);
    assert!(o.status.success(), "{}", text(&o));

    let dir = workdir(USER_A, "squat");
    let job = sbatch(USER_A, &dir, &["-N1", "-w", node, &format!("--syndeo={image}")], "#!/bin/sh\necho CLUSTER=$RAY_ADDRESS\n");
    let state = job.wait(Duration::from_secs(180));
    assert_eq!(state, "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("CLUSTER=10.213.7."), "{}", job.output());
    let planted: Vec<_> = std::fs::read_dir(&trap).unwrap().flatten().map(|e| e.path()).collect();
    assert!(planted.is_empty(), "root wrote through B's link: {planted:?}");
    let o = in_node(node, &["stat", "-c", "%U %F", "/tmp/syndeo"]);
    assert_eq!(text(&o).trim(), "root directory", "the temp base must be root's again");
    assert!(drained_nodes().is_empty(), "a user's link drained a node: {:?}", drained_nodes());
    in_node(node, &["sh", "-c", "rm -f /tmp/syndeo.untrusted-*"]);
}
