//! A user's hung FUSE mount against syndeo's epilog, for real: the user
//! mounts a squashfs with `squashfuse` (through the setuid `fusermount3`, as
//! any user can) from one job and stops its daemon (SIGSTOP), so that every
//! access to the mount waits for an answer that never comes.
//! - Mounted inside a `--syndeo` job's own tree (its Ray log directory):
//!   the epilog's log copy and its removal never enter the mount, the epilog
//!   ends within its deadline with a line in slurmd's log, and no node drains.
//! - A process of the job stuck in the kernel on that mount (a read its
//!   daemon took and cannot answer, which SIGKILL does not end): Slurm
//!   itself drains the node for a process it cannot kill ("Kill task
//!   failed"), with `--syndeo` as without, and syndeo's epilog is not what
//!   drains it. The test says which drained the node.
//!
//! Every release's nodes have FUSE's tools and a /dev/fuse users can open
//! (tests/cluster/roots, tests/cluster/minicluster); a node without them
//! fails the test rather than skipping it.
use std::path::Path;
use std::time::{Duration, Instant};

use syndeo_tests::*;

/// Fails unless node1 has what a user needs to make a FUSE mount of a squashfs.
fn require_fuse_tools() {
    for p in ["/usr/bin/squashfuse", "/usr/bin/fusermount3", "/usr/bin/mksquashfs"] {
        assert!(
            node_path_exists("node1", p),
            "node1 has no {p}: the minicluster installs FUSE's tools on every release"
        );
    }
}

/// The daemon's job: builds a squashfs, waits for the mount point's path in
/// `target`, mounts it there with squashfuse, reads a file through it, then
/// stops the daemon and says so in `mounted` (its PID), and waits.
const DAEMON_JOB: &str = r#"#!/bin/bash
mkdir -p content && echo FROM_FUSE > content/file
mksquashfs content img.sqsh -quiet -noappend -no-progress > /dev/null
for i in $(seq 1200); do [ -s target ] && break; sleep 0.1; done
t=$(cat target)
squashfuse -f img.sqsh "$t" & d=$!
for i in $(seq 200); do grep -q FROM_FUSE "$t/file" 2>/dev/null && break; sleep 0.1; done
grep -q FROM_FUSE "$t/file" || { echo "NOT MOUNTED at $t"; exit 1; }
kill -STOP $d
echo "STOPPED $d at $t"
echo $d > mounted
sleep 100000
"#;

/// The daemons' job for a stuck process: a squashfs (`inner`, with a file of
/// 16 MiB) inside another (`outer`), each mounted with squashfuse, the inner
/// one read from the outer mount (`m2`) and mounted on the path in `target`.
/// Then the outer daemon is stopped: the inner daemon takes the next request
/// for its mount, reads for it from `m2`, and waits there for good. A
/// request the daemon has taken is one its caller waits out even after
/// SIGKILL (the kernel's `request_wait_answer`): the caller is stuck.
const CHAINED_DAEMON_JOB: &str = r#"#!/bin/bash
mkdir -p inner outer m2
head -c 16777216 /dev/urandom > inner/big
mksquashfs inner outer/inner.sqsh -quiet -noappend -no-progress > /dev/null
mksquashfs outer outer.sqsh -quiet -noappend -no-progress > /dev/null
for i in $(seq 1200); do [ -s target ] && break; sleep 0.1; done
t=$(cat target)
squashfuse -f outer.sqsh m2 & d2=$!
for i in $(seq 200); do [ -s m2/inner.sqsh ] && break; sleep 0.1; done
squashfuse -f m2/inner.sqsh "$t" & d1=$!
for i in $(seq 200); do [ -e "$t/big" ] && break; sleep 0.1; done
[ -e "$t/big" ] || { echo "NOT MOUNTED at $t"; exit 1; }
kill -STOP $d2
echo "STOPPED $d2 under $d1 at $t"
echo $d1 > mounted
sleep 100000
"#;

/// Starts a daemons' job (`script`) on node1 in its own directory.
fn daemon_job_with(name: &str, script: &str) -> (Job, std::path::PathBuf) {
    let dir = workdir(user_a(), name);
    (sbatch(user_a(), &dir, &["-N1", "-w", "node1"], script), dir)
}

fn daemon_job(name: &str) -> (Job, std::path::PathBuf) {
    daemon_job_with(name, DAEMON_JOB)
}

/// Cancels the daemons' job and waits for its end (its stopped daemons
/// are killed with it).
fn end_daemons(daemon: &Job) {
    run(&["scancel", &daemon.id.to_string()]);
    let _ = daemon.wait(Duration::from_secs(120));
}

/// Waits for the daemon's job to have mounted and stopped its daemon.
fn wait_mounted(daemon: &Job, dir: &Path) {
    let start = Instant::now();
    while !dir.join("mounted").exists() {
        assert!(start.elapsed() < Duration::from_secs(120), "no FUSE mount: {}", daemon.output());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A `--syndeo` job mounts (through the daemon's job) a FUSE file system in
/// its own Ray log directory and leaves it hung. Its epilog copies the logs
/// and removes the tree without entering the mount, ends within the
/// epilog's deadline, says so in slurmd's log, and drains nothing.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_hung_fuse_mount_in_the_jobs_own_tree_leaves_the_epilog_bounded_and_drains_nothing() {
    require_fuse_tools();
    let image = image();
    let (daemon, bdir) = daemon_job("fuse-daemon-tree");
    let _cancel = CancelOnDrop(vec![daemon.id]);
    let script = format!(
        r#"#!/bin/bash
logs=$(ls -d /tmp/syndeo/$SLURM_JOB_ID/ray/session_2*/logs | head -n1)
mkdir "$logs/hung" && echo "$logs/hung" > {b}/target
for i in $(seq 1200); do [ -s {b}/mounted ] && break; sleep 0.1; done
[ -s {b}/mounted ] || {{ echo "NO MOUNT"; exit 1; }}
grep -qF " $logs/hung " /proc/self/mountinfo || {{ echo "NO MOUNT at $logs/hung"; exit 1; }}
echo "HUNG MOUNT $(cat {b}/mounted)"
"#,
        b = bdir.display()
    );
    let dir = workdir(user_a(), "fuse-tree");
    let job = sbatch(user_a(), &dir, &["-N1", "-w", "node1", &format!("--syndeo={image}")], &script);
    let _cancel_job = CancelOnDrop(vec![job.id]);
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert!(job.stdout().contains("HUNG MOUNT "), "the mount was not made: {}\n{}", job.output(), daemon.output());
    let log = slurmd_log("node1");
    let ended = format!("syndeo: epilog for job {}: ", job.id);
    let line = log.lines().find(|l| l.contains(&ended) && l.contains("node clean in"));
    assert!(line.is_some(), "the epilog of job {} did not end with a clean node", job.id);
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
    assert!(!node_path_exists("node1", &state_dir(job.id)), "the job's state is left");
    let tree = format!("/tmp/syndeo/{}", job.id);
    assert!(!node_path_exists("node1", &tree), "the job's tree is left");
    let mounts = text(&in_node("node1", &["cat", "/proc/self/mountinfo"]));
    assert!(!mounts.contains(&format!("{tree}/")), "a mount is left in the job's tree: {mounts}");
    // The logs were kept, without anything from the mount.
    let kept = dir.join(format!("syndeo-{}/node1", job.id));
    assert!(kept.join("agent.log").is_file(), "no logs kept in {}", kept.display());
    let grep = run(&["grep", "-rl", "FROM_FUSE", kept.to_str().unwrap()]);
    assert!(text(&grep).trim().is_empty(), "the copy read the mount: {}", text(&grep));
    end_daemons(&daemon);
}

/// A job's batch script reads a file on a hung FUSE mount (the daemon has
/// taken the request and waits itself) and is cancelled: no signal ends it.
/// How the node comes out of it.
fn stuck_job(name: &str, syndeo: Option<&str>) -> Stuck {
    let (daemon, bdir) = daemon_job_with(&format!("fuse-daemon-{name}"), CHAINED_DAEMON_JOB);
    let mnt = bdir.join("mnt");
    let _debris = Debris { daemon: daemon.id, mounts: vec![mnt.clone(), bdir.join("m2")] };
    std::fs::create_dir_all(&mnt).unwrap();
    run(&["chown", user_a(), mnt.to_str().unwrap()]);
    std::fs::write(bdir.join("target"), format!("{}\n", mnt.display())).unwrap();
    wait_mounted(&daemon, &bdir);
    let script = format!("#!/bin/bash\necho READING\ntail -c 4096 {}/big > /dev/null\necho READ\n", mnt.display());
    let dir = workdir(user_a(), &format!("fuse-{name}"));
    let mut args = vec!["-N1".to_string(), "-w".into(), "node1".into()];
    args.extend(syndeo.map(|i| format!("--syndeo={i}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = sbatch(user_a(), &dir, &args, &script);
    let _cancel_job = CancelOnDrop(vec![job.id]);
    job.wait_line("READING", Duration::from_secs(240));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!job.stdout().contains("READ\n"), "the read was answered: {}", job.output());
    run(&["scancel", &job.id.to_string()]);
    // Slurm gives up on the step after UnkillableStepTimeout and says so in
    // slurmd's log; it may drain the node for it.
    let gave_up = format!("JOB {} STEPD TERMINATED ON node1", job.id);
    let start = Instant::now();
    while !slurmd_log("node1").contains(&gave_up) && !node1_drained() {
        assert!(start.elapsed() < Duration::from_secs(400), "Slurm never gave up on job {}", job.id);
        std::thread::sleep(Duration::from_secs(1));
    }
    // The daemons' end (their job cancelled) lets the stuck read return.
    end_daemons(&daemon);
    let _ = job.wait(Duration::from_secs(180));
    // Slurm's drain, if any, comes with the step's end: watch for it a while
    // once the job is over.
    let start = Instant::now();
    while !node1_drained() && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_secs(1));
    }
    let state = node1_state();
    let reason = if node1_drained() { state } else { String::new() };
    let slurm_line = slurmd_log("node1").lines().find(|l| l.contains(&gave_up)).map(str::to_string);
    let epilog = format!("syndeo: epilog for job {}: ", job.id);
    let ended = |l: &&str| l.contains(&epilog) && (l.contains("node clean in") || l.contains("not clean"));
    let line = slurmd_log("node1").lines().find(ended).map(str::to_string);
    Stuck { drained: reason, slurm_line, epilog: line }
}

/// node1's state and reason, as sinfo shows them.
fn node1_state() -> String {
    text(&run(&["sinfo", "-h", "-n", "node1", "-o", "%t %E"])).trim().to_string()
}

fn node1_drained() -> bool {
    let state = node1_state();
    state.starts_with("drain") || state.starts_with("drng")
}

/// What a stuck-process test leaves, taken away however it ends: the
/// daemons' job (cancelled, its stopped daemons killed), their mounts (not
/// connected once the daemons are gone) and Slurm's drain of node1.
struct Debris {
    daemon: u32,
    mounts: Vec<std::path::PathBuf>,
}

impl Drop for Debris {
    fn drop(&mut self) {
        // Never a panic here (this may run while one unwinds): bounded, quiet.
        run(&["scancel", &self.daemon.to_string()]);
        let job = Job { id: self.daemon, dir: std::path::PathBuf::from("/") };
        let start = Instant::now();
        while matches!(job.field("JobState").as_deref(), Some("RUNNING" | "PENDING" | "COMPLETING"))
            && start.elapsed() < Duration::from_secs(120)
        {
            std::thread::sleep(Duration::from_millis(500));
        }
        for m in &self.mounts {
            in_node("node1", &["umount", "-l", m.to_str().unwrap()]);
        }
        if node1_drained() {
            run(&["scontrol", "update", "nodename=node1", "state=resume"]);
        }
    }
}

/// How a node came out of a job stuck on a hung FUSE mount.
#[derive(Debug)]
struct Stuck {
    /// `sinfo`'s state and reason if the node was drained, else empty.
    drained: String,
    /// Slurm's line saying it gave up on the step, if any.
    slurm_line: Option<String>,
    /// The line that ends syndeo's epilog for the job, if any.
    epilog: Option<String>,
}

/// A process stuck in the kernel on the user's hung FUSE mount: Slurm gives
/// up on the step with a line in slurmd's log, and drains the node or not,
/// alike whether or not the job has `--syndeo` (26.05: "Kill task failed");
/// with `--syndeo`, syndeo's epilog still ends, within its deadline, with
/// its line in slurmd's log, and adds no drain of its own.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_process_stuck_on_a_hung_fuse_mount_is_slurms_alike_with_and_without_syndeo_and_the_epilog_still_ends() {
    require_fuse_tools();
    let image = image();
    let plain = stuck_job("plain", None);
    let with = stuck_job("syndeo", Some(&image));
    eprintln!("without --syndeo: {plain:?}\nwith --syndeo: {with:?}");
    assert!(drained_nodes().is_empty(), "node1 not resumed: {:?}", drained_nodes());
    // What Slurm does is Slurm's, the same with and without syndeo: it says
    // in slurmd's log that it gave up, and drains or not alike.
    let said = |s: &Stuck| s.slurm_line.is_some() || !s.drained.is_empty();
    assert!(said(&plain) && said(&with), "without: {plain:?}\nwith: {with:?}");
    assert_eq!(plain.drained.is_empty(), with.drained.is_empty(), "without: {plain:?}\nwith: {with:?}");
    if with.drained.is_empty() {
        eprintln!("Slurm {} drained the node for neither job", release());
    } else {
        eprintln!("Slurm {} drained the node for both jobs: {}", release(), with.drained);
    }
    // syndeo's epilog ended within its deadline and added no drain of its own.
    assert!(with.epilog.is_some(), "no end of syndeo's epilog in slurmd's log: {with:?}");
    assert!(!with.drained.contains("syndeo"), "syndeo drained the node: {with:?}");
}
