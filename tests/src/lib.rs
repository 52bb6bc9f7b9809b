//! The minicluster's one client: submit jobs as an unprivileged user, wait
//! for them, and look inside the minicluster's nodes. The integration tests
//! use it as a library, the benchmarks (bench/bench.py) through its binary,
//! `syndeo-mc` (src/bin/syndeo-mc.rs). The tests need the minicluster up
//! (`tests/cluster/minicluster up`) and the Ray test image
//! (`tests/cluster/minicluster image`); `tests/run` does both. They are
//! `#[ignore]`d so a plain `cargo test` runs only unit tests.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use syndeo_protocol::layout::{self, JobDir, STATE_SECRET};

pub mod packages;

/// Which of the minicluster's clusters the tests run against
/// (SYNDEO_MINICLUSTER, 0 by default): `tests/run` runs two releases at once.
pub fn instance() -> u32 {
    std::env::var("SYNDEO_MINICLUSTER").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The cluster's state directory (what `minicluster up` wrote).
pub fn mc_state_dir() -> String {
    match instance() {
        0 => "/run/syndeo-minicluster".into(),
        k => format!("/run/syndeo-minicluster-{k}"),
    }
}

/// Whether this cluster is up: `minicluster up` wrote its nodes.
pub fn is_up() -> bool {
    Path::new(&format!("{}/nodes", mc_state_dir())).exists()
}

/// A file `minicluster up` writes into the state directory for tests (users,
/// prefix, fabric_prefix, netns_prefix, log_dir): the script alone says how
/// each cluster is named.
fn mc_required(name: &str) -> String {
    mc_state(name).unwrap_or_else(|| {
        panic!("the minicluster is not up (no {}/{name}): run tests/cluster/minicluster up", mc_state_dir())
    })
}

/// The cluster's two test users, as `up` made them (syndeo-a and syndeo-b on
/// cluster 0, syndeo-aK and syndeo-bK on cluster K).
fn test_users() -> &'static [String; 2] {
    static USERS: std::sync::OnceLock<[String; 2]> = std::sync::OnceLock::new();
    USERS.get_or_init(|| {
        let listed = mc_required("users");
        match listed.split_whitespace().collect::<Vec<_>>()[..] {
            [a, b] => [a.to_string(), b.to_string()],
            _ => panic!("{}/users names not two users: {listed:?}", mc_state_dir()),
        }
    })
}

/// A test user's home directory.
pub fn home(user: &str) -> String {
    format!("/home/{user}")
}

/// The user whose jobs a test runs.
pub fn user_a() -> &'static str {
    &test_users()[0]
}

/// Another user: the co-tenant, the attacker.
pub fn user_b() -> &'static str {
    &test_users()[1]
}

/// The first three parts of the nodes' addresses on the cluster's bridge
/// ("10.213.7" on cluster 0).
pub fn bridge_prefix() -> String {
    mc_required("prefix")
}

/// The same for the second network, the fast fabric's stand-in (eth1).
pub fn fabric_prefix() -> String {
    mc_required("fabric_prefix")
}

/// The network namespace of `node` (`ip -n`).
pub fn node_netns(node: &str) -> String {
    format!("{}{node}", mc_required("netns_prefix"))
}

/// Where the cluster's Slurm daemons log.
pub fn slurm_log_dir() -> String {
    mc_required("log_dir")
}

/// The minicluster script, for this cluster.
fn mc_command() -> Command {
    let mut c = Command::new(minicluster());
    c.env("SYNDEO_MINICLUSTER", instance().to_string());
    c
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn minicluster() -> PathBuf {
    repo().join("tests/cluster/minicluster")
}

/// Slurm's client commands: they run as the running release's (`minicluster exec`).
const SLURM_CLIENTS: &[&str] =
    &["sbatch", "srun", "salloc", "scontrol", "squeue", "sinfo", "scancel", "sstat", "sacct"];

/// Runs a command, returning its output (never panics on a non-zero exit).
/// Slurm's client commands run as the running release's.
pub fn run(argv: &[&str]) -> Output {
    if SLURM_CLIENTS.contains(&argv[0]) {
        return mc_command()
            .args(["exec", "--"])
            .args(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"));
    }
    Command::new(argv[0]).args(&argv[1..]).output().unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
}

/// `minicluster restart`: slurmctld and every slurmd again.
pub fn restart() -> Output {
    mc_command().arg("restart").output().expect("minicluster restart")
}

/// `minicluster up` again, with the release and mode it runs now.
pub fn minicluster_up_again() -> Output {
    let release = release();
    let mut argv = vec![minicluster().to_str().unwrap().to_string(), "up".into(), "--slurm".into(), release];
    if !cgroup_mode() {
        argv.push("--no-cgroups".into());
    }
    argv.extend(mc_state("options").unwrap_or_default().split_whitespace().map(|o| format!("--{o}")));
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    run(&refs)
}

/// A file of the minicluster's state (release, root, mode, nodes).
fn mc_state(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("{}/{name}", mc_state_dir())).ok().map(|s| s.trim().to_string())
}

/// The Slurm release the minicluster runs ("22.05", "24.11", "26.05").
pub fn release() -> String {
    mc_state("release").unwrap_or_else(|| "22.05".into())
}

/// Where the running release's root lies on the host ("" for the host's own).
pub fn root_prefix() -> String {
    mc_state("root").filter(|r| r != "/").unwrap_or_default()
}

/// syndeo's container runtime on the running release ("apptainer" or "bubblewrap").
pub fn runtime() -> String {
    let conf = std::fs::read_to_string(format!("{}/etc/syndeo/syndeo.toml", root_prefix())).unwrap_or_default();
    if conf.contains("runtime = \"apptainer\"") {
        "apptainer".into()
    } else {
        "bubblewrap".into()
    }
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `argv` as `user` in `dir` (no shell; in the running release's root),
/// with a login-like environment of its own: nothing of the test process
/// (sbatch exports the submitter's environment into the job).
pub fn as_user(user: &str, dir: &Path, argv: &[&str]) -> Output {
    Command::new(minicluster())
        .args(["exec", "--user", user, "--cwd", dir.to_str().unwrap(), "--"])
        .args(argv)
        .env_clear()
        .env("SYNDEO_MINICLUSTER", instance().to_string())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home(user))
        .env("USER", user)
        .env("LOGNAME", user)
        .current_dir(dir)
        .output()
        .expect("runuser")
}

pub fn image() -> String {
    let o = run(&[minicluster().to_str().unwrap(), "image"]);
    assert!(o.status.success(), "building the test image failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).lines().last().expect("image path").trim().to_string()
}

pub fn nodes() -> Vec<String> {
    std::fs::read_to_string(format!("{}/nodes", mc_state_dir()))
        .expect("the minicluster is not up: run tests/cluster/minicluster up")
        .lines()
        .map(str::to_string)
        .collect()
}

/// A fresh work directory owned by `user`, for one test's job files.
pub fn workdir(user: &str, name: &str) -> PathBuf {
    let d = PathBuf::from(format!("{}/syndeo-tests/{name}", home(user)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    run(&["chown", "-R", &format!("{user}:{user}"), d.parent().unwrap().to_str().unwrap()]);
    d
}

pub fn write_file(user: &str, path: &Path, content: &str) {
    std::fs::write(path, content).unwrap();
    run(&["chown", &format!("{user}:{user}"), path.to_str().unwrap()]);
}

pub struct Job {
    pub id: u32,
    pub dir: PathBuf,
}

/// `sbatch --parsable ARGS script` as `user`; panics with sbatch's output if refused.
pub fn sbatch(user: &str, dir: &Path, args: &[&str], script: &str) -> Job {
    let path = dir.join("job.sh");
    write_file(user, &path, script);
    // The file names Job::stdout_path and stderr_path give.
    let mut argv = vec!["sbatch", "--parsable", "-o", "job.out", "-e", "job.err"];
    argv.extend_from_slice(args);
    argv.push("job.sh");
    let o = as_user(user, dir, &argv);
    assert!(o.status.success(), "sbatch {args:?} failed: {}", text(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().split(';').next().unwrap().parse().expect("job id");
    Job { id, dir: dir.to_path_buf() }
}

/// The value of `name` in what `scontrol show KIND ID` prints (`NAME=value`).
fn scontrol_field(kind: &str, id: &str, name: &str) -> Option<String> {
    let o = run(&["scontrol", "show", kind, id]);
    text(&o).split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_string))
}

/// A field of `scontrol show node NODE` ("CPUTot", "State", ...).
pub fn node_field(node: &str, name: &str) -> Option<String> {
    scontrol_field("node", node, name)
}

/// `scancel JOB`, as root.
pub fn cancel(job: u32) -> Output {
    run(&["scancel", &job.to_string()])
}

impl Job {
    pub fn field(&self, name: &str) -> Option<String> {
        scontrol_field("job", &self.id.to_string(), name)
    }

    /// The job's nodes, one name each: its `NodeList` expanded by
    /// `scontrol show hostnames`, in Slurm's order.
    pub fn nodes(&self) -> Vec<String> {
        let list = self.field("NodeList").expect("NodeList");
        let o = run(&["scontrol", "show", "hostnames", &list]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Waits until the job is over and its epilogs have finished; returns its state.
    pub fn wait(&self, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let state = self.field("JobState").unwrap_or_default();
            let done = !matches!(state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "");
            if done {
                // Epilogs run while the job is COMPLETING; wait for them on every node.
                if nodes().iter().all(|n| !node_path_exists(n, &state_dir(self.id))) || start.elapsed() > limit {
                    return state;
                }
            }
            if start.elapsed() >= limit {
                // A test that gives up must not leave its job holding the
                // nodes (after the report: the job's logs go with it).
                let report = self.report();
                cancel(self.id);
                panic!("job {} still {state} after {limit:?} (cancelled): {report}", self.id);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Where the job's stdout goes (`sbatch -o`).
    pub fn stdout_path(&self) -> PathBuf {
        self.dir.join("job.out")
    }

    /// Where the job's stderr goes (`sbatch -e`).
    pub fn stderr_path(&self) -> PathBuf {
        self.dir.join("job.err")
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.stdout_path()).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    pub fn output(&self) -> String {
        format!("--- stdout ---\n{}--- stderr ---\n{}", self.stdout(), self.stderr())
    }

    /// What a test that gives up on the job prints: its output, then what
    /// Slurm says of it and of the nodes, and the end of syndeo's logs on
    /// every node (an empty output alone cannot tell a job Slurm never
    /// started from a cluster that never met).
    pub fn report(&self) -> String {
        let mut r = self.output();
        let job = text(&run(&["scontrol", "-o", "show", "job", &self.id.to_string()]));
        let keep = ["JobState=", "Reason=", "NodeList=", "BatchHost=", "RunTime=", "StartTime="];
        let fields: Vec<&str> = job.split_whitespace().filter(|kv| keep.iter().any(|k| kv.starts_with(k))).collect();
        r.push_str(&format!("--- slurm: job {} ---\n{}\n", self.id, fields.join(" ")));
        r.push_str(&format!(
            "--- slurm: nodes ---\n{}",
            text(&run(&["sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T %E"]))
        ));
        let dir = JobDir::new(Path::new(layout::DEFAULT_RUNTIME_BASE), self.id);
        for n in nodes() {
            for f in [dir.agent_log(), dir.ray_log(), dir.failed_note()] {
                let f = f.display().to_string();
                let o = in_node(&n, &["tail", "-n", "15", &f]);
                if o.status.success() && !o.stdout.is_empty() {
                    r.push_str(&format!("--- {n}: {f} (end) ---\n{}", String::from_utf8_lossy(&o.stdout)));
                }
            }
        }
        r
    }
}

/// Runs a command inside a node's namespaces (network, UTS, mount).
pub fn in_node(node: &str, argv: &[&str]) -> Output {
    let mut a = vec![minicluster().to_str().unwrap().to_string(), "node-exec".into(), node.into()];
    a.extend(argv.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    run(&refs)
}

pub fn node_path_exists(node: &str, path: &str) -> bool {
    in_node(node, &["test", "-e", path]).status.success()
}

/// PIDs of `user`'s processes on `node` (seen from inside the node).
pub fn user_processes(node: &str, user: &str) -> Vec<String> {
    let o = in_node(node, &["ps", "-u", user, "-o", "pid=,args="]);
    String::from_utf8_lossy(&o.stdout).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// Lines of a node's slurmd log (a byte that is not UTF-8 becomes U+FFFD).
pub fn slurmd_log(node: &str) -> String {
    let raw = std::fs::read(format!("{}/slurmd-{node}.log", slurm_log_dir())).unwrap_or_default();
    String::from_utf8_lossy(&raw).into_owned()
}

/// Node states that mean a node was taken out of service.
pub fn drained_nodes() -> Vec<String> {
    let o = run(&["sinfo", "-h", "-N", "-o", "%N %t"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| ["drain", "drng", "down", "fail"].iter().any(|s| l.contains(s)))
        .map(str::to_string)
        .collect()
}

/// Everything a syndeo job may leave on a node: processes, dirs, shm objects.
/// A zombie has ended and waits only to be reaped; one handed to PID 1 waits
/// for this machine's init, which reaps every ~2 s (a user's `salloc` that
/// exits before its `srun` leaves one). So zombies get up to 5 s to go before
/// they count.
pub fn leftovers(job: u32, user: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = leftovers_now(job, user);
        if !found.iter().any(|f| f.ends_with("<defunct>")) || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn leftovers_now(job: u32, user: &str) -> Vec<String> {
    let mut found = Vec::new();
    for n in nodes() {
        for p in user_processes(&n, user) {
            found.push(format!("{n}: process {p}"));
        }
        for path in [
            format!("/run/syndeo/{job}"),
            state_dir(job),
            format!("/tmp/syndeo/{job}"),
            // Where the temp dir moves under Slurm's job container.
            format!("/var/tmp/syndeo/{job}"),
            format!("/run/syndeo-shm/{job}"),
        ] {
            if node_path_exists(&n, &path) {
                found.push(format!("{n}: {path}"));
            }
        }
        let shm = in_node(&n, &["find", "/dev/shm", "/tmp", "-user", user]);
        for l in String::from_utf8_lossy(&shm.stdout).lines() {
            found.push(format!("{n}: file {l}"));
        }
    }
    found
}

/// `job` of `user` left nothing on any node, and no node is drained.
pub fn assert_clean(job: &Job, user: &str) {
    let left = leftovers(job.id, user);
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// A batch script that says when it ran: a job syndeo fails never runs it.
pub const SCRIPT_RAN: &str = "#!/bin/sh\necho SCRIPT RAN\n";

impl Job {
    /// Waits (up to `limit`) for a job of [`SCRIPT_RAN`] that syndeo must
    /// fail: it ends other than COMPLETED, its script never ran, and its
    /// output says `says`. Returns the output, for the caller's own checks.
    pub fn assert_refused(&self, limit: Duration, says: &str) -> String {
        let state = self.wait(limit);
        let out = self.output();
        assert_ne!(state, "COMPLETED", "job {}: {out}", self.id);
        assert!(!out.contains("SCRIPT RAN"), "job {}: the script ran: {out}", self.id);
        assert!(out.contains(says), "job {}: wanted {says:?} in: {out}", self.id);
        out
    }

    /// Waits until Slurm says the job runs.
    pub fn wait_running(&self, limit: Duration) {
        let t = Instant::now();
        while self.field("JobState").as_deref() != Some("RUNNING") {
            assert!(t.elapsed() < limit, "job {} did not start within {limit:?}: {}", self.id, self.report());
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The lines of the job's stdout that start with `prefix`, prefix removed.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        self.stdout().lines().filter_map(|l| l.strip_prefix(prefix).map(str::to_string)).collect()
    }

    /// Waits until the job's stdout has `n` lines starting with `prefix`.
    pub fn wait_lines(&self, prefix: &str, n: usize, limit: Duration) -> Vec<String> {
        let t = Instant::now();
        loop {
            let found = self.lines(prefix);
            if found.len() >= n {
                return found;
            }
            assert!(
                t.elapsed() < limit,
                "job {} printed {} of {n} {prefix} lines within {limit:?}: {}",
                self.id,
                found.len(),
                self.report()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until the job's stdout has a line starting with `prefix`; returns
    /// the rest of that line. Panics with the output if the job ends first.
    pub fn wait_line(&self, prefix: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.stdout().lines().find_map(|l| l.strip_prefix(prefix)) {
                return l.to_string();
            }
            let state = self.field("JobState").unwrap_or_default();
            assert!(
                matches!(state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | ""),
                "job {} is {state} without printing {prefix}: {}",
                self.id,
                self.report()
            );
            assert!(start.elapsed() < limit, "job {} printed no {prefix} within {limit:?}: {}", self.id, self.report());
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until the agent of `job_id` (this job, or one of its
    /// heterogeneous components) runs on `node`; its PID. Panics with this
    /// job's output if none does within `limit`.
    pub fn wait_for_agent(&self, job_id: u32, node: &str, limit: Duration) -> i32 {
        let t = Instant::now();
        loop {
            if let Some(pid) = agent_pid(job_id, node) {
                return pid;
            }
            assert!(t.elapsed() < limit, "no agent of job {job_id} on {node}: {}", self.report());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the job's stderr contains `needle` (the job may have ended
    /// by then); panics with the output if it does not within `limit`.
    pub fn wait_stderr(&self, needle: &str, limit: Duration) {
        let start = Instant::now();
        while !self.stderr().contains(needle) {
            assert!(start.elapsed() < limit, "job {} wrote no {needle:?} within {limit:?}: {}", self.id, self.report());
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// All processes on this machine (every node shares its PID namespace) that
/// carry syndeo's marker for `job`: the agent, the container runtime and Ray.
pub fn marked_processes(job: u32) -> Vec<i32> {
    let want = format!("SYNDEO_JOB_ID={job}");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// A field of /proc/PID/status ("CapEff", "NoNewPrivs", "Uid", "Groups", ...).
pub fn proc_status(pid: i32, field: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
}

pub fn proc_cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// Every command line on the machine, for secrets that must not be there.
pub fn all_cmdlines() -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .map(|p| (p, proc_cmdline(p)))
        .collect()
}

/// `id -u` / `id -G` of a user, as numbers.
pub fn user_ids(user: &str) -> (u32, Vec<u32>) {
    let uid = text(&run(&["id", "-u", user])).trim().parse().unwrap();
    let groups = text(&run(&["id", "-G", user])).split_whitespace().map(|g| g.parse().unwrap()).collect();
    (uid, groups)
}

/// A test image directory, built and cached by `tests/image/build ARGS`
/// (a directory serves both runtimes: Apptainer runs it as a sandbox).
pub fn built_image(args: &[&str]) -> String {
    let mut argv = vec![repo().join("tests/image/build").to_str().unwrap().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = run(&argv);
    assert!(o.status.success(), "tests/image/build {args:?} failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).lines().last().expect("image path").trim().to_string()
}

/// The test image with Ray's default extras (the dashboard and the Ray
/// client server).
pub fn image_with_ray_default() -> String {
    built_image(&["--default"])
}

/// An image of Ray `version` on Debian `suite` (bookworm: Python 3.11,
/// trixie: Python 3.13).
pub fn image_of_ray(version: &str, suite: &str) -> String {
    built_image(&["--ray", version, "--suite", suite])
}

/// A variant of `image`: a hard-linked copy (`cp -al`, no data copied) at
/// `{image}-{suffix}`, changed by `alter` (given its path) once, and cached
/// beside it (`.complete`). `alter` must replace files, never write into
/// one: they are the image's own.
pub fn linked_copy(image: &str, suffix: &str, alter: impl FnOnce(&str)) -> String {
    let copy = format!("{image}-{suffix}");
    if !Path::new(&format!("{copy}/.complete")).exists() {
        let _ = std::fs::remove_dir_all(&copy);
        let o = run(&["cp", "-al", image, &copy]);
        assert!(o.status.success(), "cp -al: {}", text(&o));
        alter(&copy);
        std::fs::write(format!("{copy}/.complete"), "").unwrap();
    }
    copy
}

/// The test image without Ray: its copy with Ray's command and package removed.
pub fn image_without_ray() -> String {
    linked_copy(&built_image(&[]), "noray", |noray| {
        for p in ["usr/local/bin/ray", "usr/local/lib/python3.11/dist-packages/ray"] {
            let o = run(&["rm", "-rf", &format!("{noray}/{p}")]);
            assert!(o.status.success(), "{}", text(&o));
        }
    })
}

/// The test image whose Ray dashboard agent starts `secs` seconds late, as
/// on a loaded node or from a slow file system: its copy with a `.pth` file
/// in Python's site directory that sleeps in that process alone.
pub fn image_with_slow_dashboard_agent(secs: u32) -> String {
    linked_copy(&built_image(&[]), &format!("slowagent{secs}"), |copy| {
        let line = format!(
            "import time; b'dashboard/agent.py' in open('/proc/self/cmdline', 'rb').read() and time.sleep({secs})\n"
        );
        std::fs::write(format!("{copy}/usr/local/lib/python3.11/dist-packages/syndeo_slow_agent.pth"), line).unwrap();
    })
}

/// One of the attack scripts in tests/attacks/, written into `dir` for `user`.
pub fn attack_script(user: &str, dir: &Path, name: &str) -> PathBuf {
    let path = repo().join("tests/attacks").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let to = dir.join(name);
    write_file(user, &to, &text);
    to
}

/// Whether the minicluster runs Slurm's per-job /tmp and /dev/shm (`up --job-container`).
pub fn job_container_mode() -> bool {
    mc_state("options").is_some_and(|o| o.split_whitespace().any(|w| w == "job-container"))
}

/// Whether the minicluster runs slurmdbd (`up --accounting`).
pub fn accounting_mode() -> bool {
    mc_state("options").is_some_and(|o| o.split_whitespace().any(|w| w == "accounting"))
}

/// A job's cgroup directory for `controller` on `node`, as Slurm's cgroup/v1
/// plugin names it on the minicluster (`slurm_<node>` from Debian's
/// multiple-slurmd build).
pub fn job_cgroup(controller: &str, node: &str, uid: u32, job: u32) -> String {
    format!("/sys/fs/cgroup/{controller}/slurm_{node}/uid_{uid}/job_{job}")
}

/// Whether the minicluster runs Slurm's cgroup plugins (`up` without `--no-cgroups`).
pub fn cgroup_mode() -> bool {
    mc_state("mode").is_some_and(|m| m == "cgroups")
}

/// A node's address on the minicluster's bridge.
pub fn node_addr(node: &str) -> String {
    let i: usize = node.trim_start_matches("node").parse().expect("nodeN");
    format!("{}.{}", bridge_prefix(), 10 + i)
}

/// The address `job`'s agent on `node` serves its mesh on (root's view, `ss`).
pub fn mesh_address(job: u32, node: &str) -> String {
    let pid = agent_pid(job, node).expect("the agent");
    let o = in_node(node, &["ss", "-ltnpH"]);
    let line = text(&o).lines().find(|l| l.contains(&format!("pid={pid},"))).map(str::to_string);
    line.and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_else(|| panic!("no mesh port: {}", text(&o)))
}

/// Root's state directory of `job` on a node (`syndeo_protocol::layout`).
pub fn state_dir(job: u32) -> String {
    layout::state_dir(Path::new(layout::DEFAULT_RUNTIME_BASE), job).display().to_string()
}

/// Where root's state directories of jobs are on a node (`state_dir`'s parent).
pub fn state_dirs() -> String {
    Path::new(layout::DEFAULT_RUNTIME_BASE).join(layout::JOBS_DIR).display().to_string()
}

/// The job's secret on `node`, as root keeps it.
pub fn job_secret(job: u32, node: &str) -> String {
    text(&in_node(node, &["cat", &format!("{}/{STATE_SECRET}", state_dir(job))])).trim().to_string()
}

/// The PID of `node`'s slurmd (its namespaces are the node's).
pub fn slurmd_pid(node: &str) -> i32 {
    std::fs::read_to_string(format!("{}/run/slurmd-{node}.pid", root_prefix())).unwrap().trim().parse().unwrap()
}

/// The PID of the cluster's slurmctld (its mount namespace is the release's root).
pub fn slurmctld_pid() -> i32 {
    let path = format!("{}/run/slurmctld-syndeo.pid", root_prefix());
    let pid = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("slurmctld is not running ({path}: {e})"));
    pid.trim().parse().unwrap_or_else(|_| panic!("{path} holds no PID"))
}

/// The argv prefix that runs a Slurm client command of the running release
/// as `user` in `dir`: slurmctld's mount namespace, `runuser`, nothing else
/// (no script, no new namespace), for a caller that times the command
/// itself. The environment is the caller's; `as_user` is the tests' way.
pub fn slurm_client_argv(user: &str, dir: &Path) -> Vec<String> {
    let ctld = slurmctld_pid().to_string();
    let wd = format!("--wdns={}", dir.display());
    ["nsenter", "-t", &ctld, "-m", &wd, "--", "/usr/sbin/runuser", "-u", user, "--"].map(String::from).to_vec()
}

/// The argv prefix that runs a command as `user` inside `node`'s namespaces
/// (network, UTS, mount) with an empty environment: `KEY=VALUE` words, then
/// the command, follow it. nsenter, setpriv and env each exec the next, so
/// the command is the process the caller started: no script in between.
pub fn in_node_as_user_argv(node: &str, user: &str) -> Vec<String> {
    let pid = slurmd_pid(node).to_string();
    let (uid, gid) = (format!("--reuid={user}"), format!("--regid={user}"));
    ["nsenter", "-t", &pid, "-n", "-u", "-m", "--", "setpriv", &uid, &gid, "--init-groups", "--", "env", "-i"]
        .map(String::from)
        .to_vec()
}

/// A process of `job`'s cluster on `node` whose command line starts with `prefix`.
pub fn job_process(job: u32, node: &str, prefix: &str) -> Option<i32> {
    job_process_where(job, node, |cmd| cmd.starts_with(prefix))
}

/// A process of `job` on `node` whose command line satisfies `pred`.
pub fn job_process_where(job: u32, node: &str, pred: impl Fn(&str) -> bool) -> Option<i32> {
    let uts = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/uts")).ok();
    let node_uts = uts(slurmd_pid(node));
    marked_processes(job).into_iter().find(|&p| pred(&proc_cmdline(p)) && uts(p) == node_uts)
}

/// The job's launcher on `node` (`python3 <temp dir>/launcher.py`; the
/// runtime may name python3 by its full path).
pub fn launcher_pid(job: u32, node: &str) -> Option<i32> {
    job_process_where(job, node, |cmd| {
        let mut words = cmd.split_whitespace();
        words.next().is_some_and(|p| p.ends_with("python3"))
            && words.next().is_some_and(|s| s.ends_with("/launcher.py"))
    })
}

/// The PID of the node agent of `job` on `node`.
pub fn agent_pid(job: u32, node: &str) -> Option<i32> {
    job_process(job, node, "syndeo-agent serve")
}

/// The PID of the process that restarts `job`'s node agent on `node`.
pub fn supervisor_pid(job: u32, node: &str) -> Option<i32> {
    job_process(job, node, "syndeo-agent supervise")
}

/// Kills `job`'s agent on `node` for good: its supervisor first, so that
/// nothing starts it again.
pub fn kill_agent_for_good(job: u32, node: &str) {
    let supervisor = supervisor_pid(job, node).expect("the agent's supervisor");
    let agent = agent_pid(job, node).expect("the agent");
    run(&["kill", "-KILL", &supervisor.to_string()]);
    run(&["kill", "-KILL", &agent.to_string()]);
}

/// Cancels these jobs when dropped by a failing test, and waits (bounded)
/// until they have ended and their epilogs ran: a failing test leaves
/// nothing that holds the nodes, or counts as leftovers, for the tests after
/// it. (A [`Job`] does so for itself; this is for jobs a test knows by id.)
pub struct CancelOnDrop(pub Vec<u32>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            cancel_until_ended(&self.0);
        }
    }
}

/// A test that fails while its job runs cancels it: the partition has no
/// time limit, and a job left waiting (for a READY that never comes) would
/// hold its nodes, and every later test's job would wait behind it.
impl Drop for Job {
    fn drop(&mut self) {
        if std::thread::panicking() {
            cancel_until_ended(&[self.id]);
        }
    }
}

/// Cancels `jobs` and waits, up to 120 s each, until each has ended and its
/// epilogs ran on every node.
fn cancel_until_ended(jobs: &[u32]) {
    for &id in jobs {
        cancel(id);
    }
    for &id in jobs {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            let state = scontrol_field("job", &id.to_string(), "JobState").unwrap_or_default();
            let ended = !matches!(state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING");
            if ended && nodes().iter().all(|n| !node_path_exists(n, &state_dir(id))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Takes a node's link (eth0) down; brings it back up when dropped,
/// whatever the test did.
pub struct LinkDown(&'static str);

impl LinkDown {
    pub fn new(node: &'static str) -> LinkDown {
        let o = run(&["ip", "-n", &node_netns(node), "link", "set", "eth0", "down"]);
        assert!(o.status.success(), "{}", text(&o));
        LinkDown(node)
    }
}

impl Drop for LinkDown {
    fn drop(&mut self) {
        run(&["ip", "-n", &node_netns(self.0), "link", "set", "eth0", "up"]);
        run(&[
            "ip",
            "-n",
            &node_netns(self.0),
            "route",
            "replace",
            "default",
            "via",
            &format!("{}.1", bridge_prefix()),
        ]);
    }
}

/// Replaces one line of /etc/syndeo/syndeo.toml for as long as the guard lives.
pub struct ConfigOverride {
    original: String,
}

impl ConfigOverride {
    pub fn set(key: &str, value: &str) -> ConfigOverride {
        let path = format!("{}/etc/syndeo/syndeo.toml", root_prefix());
        let original = std::fs::read_to_string(&path).unwrap();
        let changed: Vec<String> = original
            .lines()
            .map(|l| if l.starts_with(&format!("{key} =")) { format!("{key} = {value}") } else { l.to_string() })
            .collect();
        assert!(changed.iter().any(|l| *l == format!("{key} = {value}")), "{key} is not in {path}");
        std::fs::write(&path, changed.join("\n") + "\n").unwrap();
        ConfigOverride { original }
    }
}

impl Drop for ConfigOverride {
    fn drop(&mut self) {
        std::fs::write(format!("{}/etc/syndeo/syndeo.toml", root_prefix()), &self.original).unwrap();
    }
}
