//! A malicious image on the minicluster: whatever a process in the job's
//! image does, it cannot outlive the job, nor push input into the user's
//! terminal.
//! - A Ray task that leaves Ray's process tree, its session and its
//!   environment (all that the epilog's search by session and marker looks
//!   at) is ended with the job, in Slurm's cgroup mode (Slurm ends the job's
//!   cgroup) and without it (`--no-cgroups`, proctrack/linuxproc: the kernel
//!   ends Ray's container's PID namespace).
//! - A process of the image run on the user's terminal (`syndeo exec`, as
//!   `srun --syndeo` runs it) does not have it as its controlling terminal,
//!   so TIOCSTI cannot queue a command for the user's shell.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use syndeo_tests::*;

/// The driver: a task on every node of the job's Ray leaves Ray's process
/// tree (a double fork), its session (`setsid`) and its environment (`env
/// -i`), and sleeps for DURATION seconds, a number no other process uses. On
/// the last node the task also stops its container's launcher (SIGSTOP), so
/// that the launcher's own stop (SIGTERM and SIGKILL to every process of the
/// container) never runs there: only the epilog can end that escapee.
const ESCAPE: &str = r#"
import os, signal, subprocess, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

DETACH = "import os; os.fork() or os.execve('/usr/bin/env', ['env', '-i', 'sleep', 'DURATION'], {})"


def stop_the_launcher():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].endswith(b"/launcher.py"):
            os.kill(int(pid), signal.SIGSTOP)
            return True
    return False


@ray.remote(num_cpus=0)
def escape(stop_launcher):
    subprocess.run([sys.executable, "-c", DETACH], env={}, start_new_session=True, check=True)
    return os.uname().nodename, stop_launcher and stop_the_launcher()


ray.init()
nodes = sorted((n["NodeManagerHostname"], n["NodeID"]) for n in ray.nodes() if n["Alive"])
refs = [escape.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(i == len(nodes) - 1)
        for i, (_, node) in enumerate(nodes)]
for host, stopped in ray.get(refs):
    print("ESCAPED", host, "launcher-stopped" if stopped else "launcher-running", flush=True)
"#;

/// Runs the driver, then holds the job until the test has looked at the escapees.
const HOLD_UNTIL_RELEASED: &str = r#"#!/bin/bash
srun --syndeo -N1 -n1 python3 escape.py
for i in $(seq 1200); do [ -e release ] && exit 0; sleep 0.25; done
"#;

/// The processes whose command line is `sleep <duration>` (every node shares
/// this machine's PID namespace).
fn sleepers(duration: &str) -> Vec<i32> {
    let want = format!("sleep {duration} ");
    all_cmdlines().into_iter().filter(|(_, c)| *c == want).map(|(p, _)| p).collect()
}

/// The session of a process (field 6 of /proc/PID/stat).
fn session_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    rest.split_whitespace().nth(3).and_then(|s| s.parse().ok()).unwrap_or(-1)
}

/// Waits up to `limit` until `n` escapees run; returns them.
fn wait_for_sleepers(duration: &str, n: usize, limit: Duration) -> Vec<i32> {
    let t = Instant::now();
    loop {
        let found = sleepers(duration);
        if found.len() >= n || t.elapsed() > limit {
            return found;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_ray_task_that_double_forks_calls_setsid_clears_its_environment_and_stops_its_launcher_ends_with_the_job() {
    let image = image();
    let dir = workdir(user_a(), "escape");
    // 86400.NNNNNN seconds: a command line of its own for this run.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_micros();
    let duration = format!("86400.{nonce:06}");
    write_file(user_a(), &dir.join("escape.py"), &ESCAPE.replace("DURATION", &duration));
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], HOLD_UNTIL_RELEASED);
    let _cancel = CancelOnDrop(vec![job.id]);
    let escaped = job.wait_lines("ESCAPED ", 2, Duration::from_secs(300));
    assert_eq!(escaped.iter().filter(|l| l.ends_with("launcher-stopped")).count(), 1, "{}", job.output());

    // They run, as the job's user, in no session of the job's agents and
    // with nothing of the job's in their environment.
    let escapees = wait_for_sleepers(&duration, 2, Duration::from_secs(30));
    assert_eq!(escapees.len(), 2, "escapees {escapees:?}: {}", job.output());
    let (uid, _) = user_ids(user_a());
    let supervisors: Vec<i32> = nodes().iter().filter_map(|n| supervisor_pid(job.id, n)).collect();
    assert_eq!(supervisors.len(), 2, "the job's supervisors: {supervisors:?}");
    for &p in &escapees {
        let real_uid = proc_status(p, "Uid").and_then(|u| u.split_whitespace().next().map(str::to_string));
        assert_eq!(real_uid, Some(uid.to_string()), "escapee {p}");
        assert!(!supervisors.contains(&session_of(p)), "escapee {p} is still in an agent's session");
        let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
        assert!(env.is_empty(), "escapee {p} kept an environment: {}", String::from_utf8_lossy(&env));
    }

    write_file(user_a(), &dir.join("release"), "");
    assert_eq!(job.wait(Duration::from_secs(240)), "COMPLETED", "{}", job.output());
    // SIGKILLed processes of a namespace whose first process died are gone
    // at once; a moment's grace for the kernel to finish.
    let left = wait_until_gone(&duration, Duration::from_secs(5));
    let mode = if cgroup_mode() { "with Slurm's cgroup plugins" } else { "without cgroups (--no-cgroups)" };
    assert!(left.is_empty(), "{mode}: escapees {left:?} outlived job {}: {}", job.id, job.output());
    assert_clean(&job, user_a());
}

/// Waits up to `limit` until no escapee runs; returns those still there.
fn wait_until_gone(duration: &str, limit: Duration) -> Vec<i32> {
    let t = Instant::now();
    loop {
        let left = sleepers(duration);
        if left.is_empty() || t.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run on a terminal: whether its stdin is one, its session, the session
/// whose controlling terminal it is (TIOCGSID: ENOTTY when it is not this
/// process's controlling terminal), and whether TIOCSTI queued a line there.
const TIOCSTI_PROBE: &str = r#"
import errno, fcntl, os, struct, sys, termios
def why(e): return errno.errorcode.get(e.errno, str(e.errno))
try:
    tty_session = struct.unpack("i", fcntl.ioctl(0, getattr(termios, "TIOCGSID", 0x5429), b"\0" * 4))[0]
except OSError as e:
    tty_session = why(e)
try:
    for c in b"INJECTED\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    pushed = "OK"
except OSError as e:
    pushed = why(e)
print(f"PROBE {sys.argv[1]} tty={os.isatty(0)} session={os.getsid(0)} tty_session={tty_session} tiocsti={pushed}", flush=True)
"#;

/// The user's shell on a terminal: it runs the probe on the host, then in the
/// image, and after each reads what waits on the terminal. A queued line is
/// what an interactive shell would run as the user, outside the image.
const HOST_SHELL: &str = r#"#!/bin/bash
python3 tiocsti.py host >> results
read -r -t 3 line; echo "READ host [$line]" >> results
syndeo exec python3 tiocsti.py image >> results
read -r -t 3 line; echo "READ image [$line]" >> results
"#;

/// The job: the shell on a fresh terminal, a pty whose session it leads
/// (Python's `pty.spawn`, which copies nothing into it once its own stdin,
/// here /dev/null, ends; `script` would type an end of file there).
const ON_A_TERMINAL: &str = r#"#!/bin/bash
python3 -c 'import os, pty; os._exit(os.waitstatus_to_exitcode(pty.spawn(["bash", "host_shell.sh"])))' > terminal.out
echo "TERMINAL CLOSED $?"
"#;

/// `PROBE <who> k=v ...` of the results, as a map.
fn probe(results: &str, who: &str) -> HashMap<String, String> {
    let line = results.lines().find_map(|l| l.strip_prefix(&format!("PROBE {who} ")));
    let line = line.unwrap_or_else(|| panic!("no {who} probe in: {results}"));
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

/// What the shell read from the terminal after `who`'s probe.
fn read_after(results: &str, who: &str) -> String {
    let line = results.lines().find_map(|l| l.strip_prefix(&format!("READ {who} [")));
    line.unwrap_or_else(|| panic!("no read after the {who} probe in: {results}")).trim_end_matches(']').to_string()
}

/// Whether the kernel lets users' processes use TIOCSTI at all (always,
/// before Linux 6.2; `dev.tty.legacy_tiocsti` since).
fn legacy_tiocsti() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map_or(true, |v| v.trim() == "1")
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_process_in_the_image_cannot_queue_input_for_the_users_shell_on_its_terminal_with_tiocsti() {
    let image = image();
    let dir = workdir(user_a(), "tiocsti");
    write_file(user_a(), &dir.join("tiocsti.py"), TIOCSTI_PROBE);
    write_file(user_a(), &dir.join("host_shell.sh"), HOST_SHELL);
    let job = sbatch(user_a(), &dir, &["-N1", &format!("--syndeo={image}")], ON_A_TERMINAL);
    let _cancel = CancelOnDrop(vec![job.id]);
    assert_eq!(job.wait(Duration::from_secs(240)), "COMPLETED", "{}", job.output());
    assert_clean(&job, user_a());
    // The probes' lines, then what the terminal showed (errors included).
    let file = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let results = format!("{}--- the terminal ---\n{}", file("results"), file("terminal.out"));
    let legacy = legacy_tiocsti();

    // The control: on the host, the probe's terminal is its shell's
    // controlling terminal, and a line it queues is what the shell reads next.
    let host = probe(&results, "host");
    assert_eq!((host["tty"].as_str(), &host["tty_session"]), ("True", &host["session"]), "{results}");
    let (pushed, read) = if legacy { ("OK", "INJECTED") } else { ("EIO", "") };
    assert_eq!((host["tiocsti"].as_str(), read_after(&results, "host").as_str()), (pushed, read), "{results}");

    // In the image: the same terminal on its stdin, but not as its
    // controlling terminal; nothing reaches the shell.
    let inside = probe(&results, "image");
    assert_eq!(inside["tty"], "True", "the image's probe had no terminal to try: {results}");
    // Both runtimes: bubblewrap with --new-session, Apptainer under `setsid`
    // (`exec_session.rs`); the terminal is not the image's controlling one.
    assert_eq!(inside["tty_session"], "ENOTTY", "the image shares the shell's terminal session: {results}");
    assert!(["EPERM", "EIO"].contains(&inside["tiocsti"].as_str()), "TIOCSTI from the image: {results}");
    assert_eq!(read_after(&results, "image"), "", "the shell read what the image queued: {results}");
}
