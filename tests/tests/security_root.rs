//! Security of syndeo's root side and of what slurmstepd reads, with the
//! attacks run for real by unprivileged users: values set by hand in a job's
//! environment, hostile files where the plugin reads, attempts to change what
//! a restarted agent reads, to stop the root side, and to squat its
//! directories; and the site key's own checks.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use syndeo_tests::*;

/// `sbatch` as `user` with one extra variable in its environment.
fn sbatch_with_env(user: &str, dir: &Path, var: (&str, &str), script: &str) -> std::process::Output {
    write_file(user, &dir.join("job.sh"), script);
    Command::new(minicluster())
        .args(["exec", "--user", user, "--cwd", dir.to_str().unwrap(), "--"])
        .args(["sbatch", "--parsable", "-N1", "-o", "job.out", "-e", "job.err", "job.sh"])
        .env_clear()
        .env("SYNDEO_MINICLUSTER", instance().to_string())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", format!("/home/{user}"))
        .env(var.0, var.1)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A user sets the `--syndeo` value by hand in the environment sbatch reads
/// options from, with values the submit-side check would refuse. Either
/// sbatch refuses them, or the job fails with a `syndeo:` message naming the
/// fault; the prolog never fails and no node is drained.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn an_image_value_set_by_hand_in_the_environment_fails_that_job_with_a_syndeo_message_and_drains_nothing() {
    let dir = workdir(user_a(), "spank-env");
    for (value, says) in
        [("-rf", "not an absolute path"), ("images/ray", "not an absolute path"), ("/a/../etc", "`..` component")]
    {
        let o = sbatch_with_env(
            user_a(),
            &dir,
            ("SLURM_SPANK__SLURM_SPANK_OPTION_syndeo_syndeo", value),
            "#!/bin/sh\necho SCRIPT RAN\n",
        );
        if !o.status.success() {
            assert!(text(&o).contains("syndeo:") && text(&o).contains(says), "{value}: {}", text(&o));
            continue;
        }
        let id: u32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        let job = Job { id, dir: dir.clone() };
        job.wait(Duration::from_secs(120));
        let out = job.output();
        assert!(!out.contains("SCRIPT RAN"), "{value}: the script ran: {out}");
        assert!(out.contains("syndeo:") && out.contains(says), "{value}: {out}");
    }
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// The job's user puts a FIFO, then a link to /dev/zero, where syndeo's
/// failure note used to lie (its job directory), and tries to make the note
/// itself in root's notes directory, then replaces the agent's socket with
/// one that never stops answering. The planted names are not syndeo's note
/// (the steps run), the notes directory refuses the user, and the endless
/// socket fails the step at once with a message; nothing hangs, slurmstepd
/// survives, no node drains.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn hostile_files_in_the_job_directory_are_not_read_as_the_note_and_an_endless_socket_fails_the_step() {
    let image = image();
    let dir = workdir(user_a(), "hostile-files");
    attack_script(user_a(), &dir, "evil_socket.py");
    let script = r#"#!/bin/bash
note=$SYNDEO_JOB_DIR/failed
mkfifo $note
timeout 60 srun -N1 -n1 -w node1 true; echo "FIFO_STEP=$?"
rm -f $note; ln -s /dev/zero $note
timeout 60 srun -N1 -n1 -w node1 true; echo "ZERO_STEP=$?"
rm -f $note
notes=$(dirname $SYNDEO_JOB_DIR)/.notes
if mkfifo $notes/$SLURM_JOB_ID 2>/dev/null; then echo PLANTED_NOTE; else echo NOTE_REFUSED; fi
python3 evil_socket.py $SYNDEO_JOB_DIR/agent.sock 90 &
sleep 1
timeout 60 srun -N1 -n1 -w node1 true; echo "EVIL_STEP=$?"
kill %1
srun -N1 -n1 -w node2 sh -c 'echo FINE_ON=$(hostname)'
"#;
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let (out, err) = (job.stdout(), job.stderr());
    let code =
        |step: &str| out.lines().find_map(|l| l.strip_prefix(&format!("{step}="))).unwrap_or("missing").to_string();
    assert_eq!(code("FIFO_STEP"), "0", "a FIFO in the job directory was taken for the note: {}", job.output());
    assert_eq!(code("ZERO_STEP"), "0", "a link in the job directory was taken for the note: {}", job.output());
    assert!(out.contains("NOTE_REFUSED") && !out.contains("PLANTED_NOTE"), "{}", job.output());
    let evil = code("EVIL_STEP");
    assert!(evil != "0" && evil != "124" && evil != "missing", "EVIL_STEP={evil}: {}", job.output());
    assert!(err.contains("over 64 KiB"), "{err}");
    assert!(out.contains("FINE_ON=node2"), "{}", job.output());
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// The agent reads the job's spec and secret from a sealed memory file root
/// handed down: the user can read it and cannot change it, and no spec lies
/// in the job directory any more. The image is pinned at the job's start: the
/// user re-points the image path at nothing and kills an agent; the restarted
/// agent runs the image the job started with and rejoins.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_state_a_restarted_agent_reads_cannot_be_changed_by_the_user_and_the_image_is_pinned() {
    let image = image();
    let dir = workdir(user_a(), "pinned");
    let link = dir.join("img");
    std::os::unix::fs::symlink(&image, &link).unwrap();
    run(&["chown", "-h", &format!("{user_a}:{user_a}", user_a = user_a()), link.to_str().unwrap()]);
    let script = r#"#!/bin/bash
echo READY
test -e $SYNDEO_JOB_DIR/job.json || echo NO_SPEC_IN_JOB_DIR
for p in $(pgrep -u $USER -x syndeo-agent); do
  python3 -c 'import sys
try:
    # Unbuffered: the write itself must fail, not a flush nobody sees.
    print("WROTE", open("/proc/%s/fd/4" % sys.argv[1], "r+b", buffering=0).write(b"{}"))
except OSError as e:
    print("REFUSED", e.errno)' $p
done
for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done
srun --syndeo -N1 -n1 python3 -c 'import ray; ray.init(); print("ALIVE", len({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}))'
"#;
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={}", link.display())], script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("READY", Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(2));
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
    let agent = agent_pid(job.id, "node2").expect("the agent on node2");
    run(&["kill", "-KILL", &agent.to_string()]);
    job.wait_stderr("rejoined the cluster", Duration::from_secs(120));
    let restarted = agent_pid(job.id, "node2").expect("a restarted agent");
    let argv = proc_cmdline(restarted);
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    assert!(out.contains("NO_SPEC_IN_JOB_DIR"), "{}", job.output());
    assert!(out.contains("REFUSED") && !out.contains("WROTE"), "the user changed the agent's state: {}", job.output());
    assert!(argv.contains(&format!("--image {image}")), "the restart did not use the pinned image: {argv}");
    assert!(out.contains("ALIVE 3"), "{}", job.output());
}

/// From another job of the same user on the node, a loop stops and kills
/// every `syndeo-agent prolog|start|epilog` it sees while three syndeo jobs
/// run there. They are root's for all their life: every attempt is refused,
/// the jobs run, and no node is drained.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_jobs_user_cannot_stop_or_kill_the_root_side_from_another_job() {
    let image = image();
    let dir = workdir(user_a(), "killer");
    attack_script(user_a(), &dir, "killer.py");
    let killer = sbatch(user_a(), &dir, &["-N1", "-w", "node1", "--mem=200M"], "#!/bin/bash\npython3 killer.py 150\n");
    let _cancel = CancelOnDrop(vec![killer.id]);
    killer.wait_running(Duration::from_secs(60));
    for i in 0..3 {
        let d = workdir(user_a(), &format!("killed-{i}"));
        let job = sbatch(
            user_a(),
            &d,
            &["-N1", "-w", "node1", &format!("--syndeo={image}")],
            "#!/bin/sh\necho CLUSTER=$RAY_ADDRESS\n",
        );
        assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
        assert!(job.stdout().contains(&format!("CLUSTER={}.", bridge_prefix())), "{}", job.output());
    }
    assert_eq!(killer.wait(Duration::from_secs(240)), "COMPLETED", "{}", killer.output());
    let attempts: u32 = killer.lines("KILL_ATTEMPTS ").first().and_then(|n| n.parse().ok()).unwrap_or(0);
    let refused: u32 = killer.lines("REFUSED ").first().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(attempts > 0, "the loop never caught a root-side process: {}", killer.output());
    assert_eq!(attempts, refused, "a signal reached the root side: {}", killer.output());
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// Before any syndeo job, another user keeps planting links where root makes
/// its temp base (and files under names root might set aside there), in a
/// tight loop, while a syndeo job starts on that node, and tries the same
/// under the shared-memory base. root never follows them and the prolog never
/// fails: the job runs, the bases are root's, nothing lands under the
/// shared-memory base, and no node is drained.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn squatting_the_temp_and_shm_bases_in_a_loop_cannot_make_a_prolog_fail() {
    let image = image();
    let trap = format!("/home/{user_b}/trap", user_b = user_b());
    let _ = std::fs::remove_dir_all(&trap);
    run(&["install", "-d", "-o", user_b(), "-g", user_b(), &trap]);
    in_node("node1", &["rm", "-rf", "/tmp/syndeo"]);
    let dir_b = workdir(user_b(), "base-squatter");
    attack_script(user_b(), &dir_b, "base_squatter.py");
    let b = sbatch(
        user_b(),
        &dir_b,
        &["-N1", "-w", "node1", "--mem=200M"],
        &format!("#!/bin/bash\npython3 base_squatter.py {trap} 60\n"),
    );
    let _cancel = CancelOnDrop(vec![b.id]);
    b.wait_running(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let dir = workdir(user_a(), "squatted-bases");
    let job = sbatch(
        user_a(),
        &dir,
        &["-N1", "-w", "node1", &format!("--syndeo={image}")],
        "#!/bin/sh\necho CLUSTER=$RAY_ADDRESS\n",
    );
    assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
    b.wait(Duration::from_secs(120));
    assert!(job.stdout().contains(&format!("CLUSTER={}.", bridge_prefix())), "{}", job.output());
    assert!(b.lines("PLANTED ").first().is_some_and(|n| n != "0"), "the squatter planted nothing: {}", b.output());
    assert_eq!(b.lines("PLANTED_SHM ").first().map(String::as_str), Some("0"), "{}", b.output());
    let planted: Vec<_> = std::fs::read_dir(&trap).unwrap().flatten().map(|e| e.path()).collect();
    assert!(planted.is_empty(), "root wrote through B's link: {planted:?}");
    for base in ["/tmp/syndeo", "/run/syndeo-shm"] {
        assert_eq!(text(&in_node("node1", &["stat", "-c", "%U %F", base])).trim(), "root directory", "{base}");
    }
    assert!(drained_nodes().is_empty(), "a user's links drained a node: {:?}", drained_nodes());
    in_node("node1", &["sh", "-c", "rm -rf /tmp/syndeo.*"]);
}

/// A site key that others can read is refused with a message that says so
/// and how to fix it: a node fault, so the node is drained with that reason
/// (the test restores the key and resumes the node).
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_site_key_others_can_read_is_a_node_fault_that_names_the_fix() {
    let image = image();
    let key = format!("{}/etc/syndeo/site.key", root_prefix());
    run(&["chmod", "0644", &key]);
    let dir = workdir(user_a(), "site-key");
    let job =
        sbatch(user_a(), &dir, &["-N1", "-w", "node3", &format!("--syndeo={image}")], "#!/bin/sh\necho SCRIPT RAN\n");
    let t = std::time::Instant::now();
    let mut reasons = String::new();
    while t.elapsed() < Duration::from_secs(120) && !reasons.contains("node3") {
        std::thread::sleep(Duration::from_millis(500));
        reasons = text(&run(&["sinfo", "-R", "-h", "-o", "%n %E"]));
    }
    run(&["chmod", "0600", &key]);
    run(&["scancel", &job.id.to_string()]);
    job.wait(Duration::from_secs(120));
    run(&["scontrol", "update", "nodename=node3", "state=resume"]);
    assert!(reasons.contains("node3") && reasons.contains("site key") && reasons.contains("mode 0600"), "{reasons}");
    let log = slurmd_log("node3");
    assert!(log.contains("is owner 0 mode 644; it must be owner root, mode 0600"), "not in slurmd's log");
    assert!(!job.stdout().contains("SCRIPT RAN"), "{}", job.output());
}

/// `scontrol requeue` of a running syndeo job: the new run gets a fresh
/// cluster with fresh secrets (its mesh secret and its Ray token differ).
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_requeued_job_gets_a_fresh_cluster_with_fresh_secrets() {
    let image = image();
    let dir = workdir(user_a(), "requeue");
    let script = "#!/bin/bash\necho \"RUN ${SLURM_RESTART_COUNT:-0} $RAY_ADDRESS $RAY_AUTH_TOKEN\"\nsleep 300\n";
    let job = sbatch(user_a(), &dir, &["-N2", "--open-mode=append", &format!("--syndeo={image}")], script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("RUN 0 ", Duration::from_secs(300));
    let first_secret = job_secret(job.id, "node1");
    assert!(run(&["scontrol", "requeue", &job.id.to_string()]).status.success());
    let second = job.wait_lines("RUN ", 2, Duration::from_secs(400));
    let second_secret = job_secret(job.id, "node1");
    run(&["scancel", &job.id.to_string()]);
    job.wait(Duration::from_secs(180));
    let first = job.lines("RUN 0 ");
    assert!(second[1].starts_with("1 "), "{second:?}");
    let token = |l: &str| l.split_whitespace().last().unwrap_or_default().to_string();
    assert_ne!(token(&first[0]), token(&second[1]), "the Ray token was reused");
    assert!(!first_secret.is_empty() && !second_secret.is_empty());
    assert_ne!(first_secret, second_secret, "the requeued run kept its mesh secret");
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
}

/// The job's own user, from another of their jobs on node1, races every name
/// root creates (or once created) where they can write, for the next job
/// ids, in a tight loop (`name_racer.py`): `failed` in each job's runtime
/// directory the moment it appears (a file, a FIFO, a link), the note itself
/// in root's notes directory, and the names the epilog's removal moves
/// directories up under. Meanwhile jobs are refused in the prolog (the site
/// configuration is broken) and then jobs run. Every refused job fails with
/// its syndeo message, every other job runs, the user makes nothing in root's
/// notes directory, and no node is drained.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn racing_the_names_root_creates_from_another_job_of_the_same_user_refuses_with_a_message_and_drains_no_node() {
    let image = image();
    let dir = workdir(user_a(), "name-racer");
    attack_script(user_a(), &dir, "name_racer.py");
    let racer = sbatch(
        user_a(),
        &dir,
        &["-N1", "-w", "node1", "--mem=200M"],
        "#!/bin/bash\npython3 name_racer.py $((SLURM_JOB_ID + 1)) 40 300\n",
    );
    let _cancel = CancelOnDrop(vec![racer.id]);
    racer.wait_running(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    {
        let _broken = ConfigOverride::set("startup_timeout", "\"soon\"");
        for i in 0..4 {
            let d = workdir(user_a(), &format!("raced-refused-{i}"));
            let job = sbatch(user_a(), &d, &["-N1", "-w", "node1", &format!("--syndeo={image}")], SCRIPT_RAN);
            job.assert_refused(Duration::from_secs(120), "syndeo's site configuration is invalid");
        }
    }
    for i in 0..2 {
        let d = workdir(user_a(), &format!("raced-ran-{i}"));
        let script = "#!/bin/sh\necho CLUSTER=$RAY_ADDRESS\n";
        let job = sbatch(user_a(), &d, &["-N1", "-w", "node1", &format!("--syndeo={image}")], script);
        assert_eq!(job.wait(Duration::from_secs(180)), "COMPLETED", "{}", job.output());
        assert!(job.stdout().contains(&format!("CLUSTER={}.", bridge_prefix())), "{}", job.output());
    }
    write_file(user_a(), &dir.join("stop"), "");
    assert_eq!(racer.wait(Duration::from_secs(120)), "COMPLETED", "{}", racer.output());
    let planted = |what: &str| racer.lines(&format!("{what} ")).first().and_then(|n| n.parse::<u64>().ok());
    assert!(planted("PLANTED_FAILED").is_some_and(|n| n > 0), "the racer never planted: {}", racer.output());
    assert_eq!(planted("PLANTED_NOTE"), Some(0), "the user made a name in root's notes dir: {}", racer.output());
    assert!(drained_nodes().is_empty(), "racing root's names drained a node: {:?}", drained_nodes());
}

/// The job's user plants, in their Ray session's log directory, a link to a
/// file of theirs, a link to a directory and a FIFO, and a session directory
/// that is a link, before the job ends. The epilog's log copy follows none of
/// them and reads no FIFO (which would hang it): the logs are kept without
/// them, the epilog ends and says the node is clean, and no node drains.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_log_copy_follows_no_link_and_reads_no_fifo_the_user_planted_and_the_epilog_ends_clean() {
    let image = image();
    let dir = workdir(user_a(), "log-links");
    let script = r#"#!/bin/bash
echo SECRET_OF_A > secret.txt
mkdir -p linked/logs && echo LINKED_SESSION > linked/logs/linked.out
ray=/tmp/syndeo/$SLURM_JOB_ID/ray
logs=$(ls -d $ray/session_2*/logs | head -n1)
ln -s $PWD/secret.txt $logs/planted-link.out
ln -s $PWD $logs/planted-dir
mkfifo $logs/planted-fifo.out
ln -s $PWD/linked $ray/session_planted
echo PLANTED $logs
"#;
    let job = sbatch(user_a(), &dir, &["-N1", "-w", "node1", &format!("--syndeo={image}")], script);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("PLANTED /tmp/syndeo/"), "{}", job.output());
    let kept = dir.join(format!("syndeo-{}/node1", job.id));
    assert!(kept.join("agent.log").is_file() && kept.join("ray").is_dir(), "no logs kept in {}", kept.display());
    let listing = text(&run(&["find", kept.to_str().unwrap()]));
    assert!(!listing.contains("planted") && !listing.contains("linked"), "a planted name was copied: {listing}");
    let grep = run(&["grep", "-rl", "-e", "SECRET_OF_A", "-e", "LINKED_SESSION", kept.to_str().unwrap()]);
    assert!(text(&grep).trim().is_empty(), "the copy followed a link: {}", text(&grep));
    let clean = format!("syndeo: epilog for job {}: node clean in", job.id);
    assert!(slurmd_log("node1").contains(&clean), "the epilog did not end clean");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// The job's own user, from their batch script, tries to read the
/// environment of every syndeo-agent process of theirs (supervisors and
/// agents, on every node) and to take its descriptors 3 (the mesh's
/// privileged socket root bound) and 4 (the job's state) with pidfd_getfd.
/// None is dumpable: every read and every take is refused.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn the_users_other_processes_can_neither_read_nor_take_the_descriptors_of_syndeos_agents() {
    let image = image();
    let dir = workdir(user_a(), "fd-taker");
    attack_script(user_a(), &dir, "fd_taker.py");
    // Once the cluster is ready: the batch script may start before the
    // other node's agent has (AGENTS 0 under CI's load).
    let job = sbatch(
        user_a(),
        &dir,
        &["-N2", &format!("--syndeo={image}")],
        "#!/bin/bash\nsyndeo wait >/dev/null\npython3 fd_taker.py\n",
    );
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let agents: u32 = job.lines("AGENTS ").first().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(agents >= 4, "expected a supervisor and an agent on each of 2 nodes: {}", job.output());
    let out = job.stdout();
    assert!(!out.contains("\nREAD ") && !out.starts_with("READ "), "an agent's environment was read: {out}");
    assert!(!out.contains("TAKEN "), "a descriptor of an agent was taken: {out}");
    assert_eq!(job.lines("REFUSED_READ ").len() as u32, agents, "{out}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// A sandbox image (a copy of the test image, `cp -al`) in which one
/// directory Ray loads its code from is writable by every user: another
/// user could put code there that the job runs as its user. The job is
/// refused with a message naming that directory, and no node drains.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_sandbox_image_with_a_directory_every_user_can_write_is_refused_naming_it() {
    let image = built_image(&[]);
    let open = linked_copy(&image, "openwrite", |_| {});
    let inside = "/usr/local/lib/python3.11/dist-packages";
    // A directory of the copy (cp -al links files, not directories).
    assert!(run(&["chmod", "0777", &format!("{open}{inside}")]).status.success());
    let dir = workdir(user_a(), "open-image");
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={open}")], SCRIPT_RAN);
    let out = job.assert_refused(Duration::from_secs(180), &format!("{inside} is writable by every user"));
    assert!(out.contains(&format!("image {open}")), "{out}");
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}
