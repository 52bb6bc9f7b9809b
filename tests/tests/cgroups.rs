//! Inside the allocation: with Slurm's cgroup plugins (the minicluster's
//! default), every process syndeo starts for a job lives in the job's
//! cgroups (its extern step), so Slurm's limits, accounting and cleanup apply
//! to Ray as to the job's own tasks. Skipped (they pass vacuously, saying so)
//! when the minicluster runs without the cgroup plugins.
use std::time::Duration;

use syndeo_tests::*;

fn needs_cgroups() -> bool {
    if !cgroup_mode() {
        eprintln!("the minicluster runs without Slurm's cgroup plugins: nothing to check here");
    }
    cgroup_mode()
}

const HOLD_THEN: &str = "for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done\n";

/// Every process of the job's cluster on every node (agent, supervisor,
/// container runtime, Ray) is in the job's memory and freezer cgroups, and a
/// Ray task that allocates far more than the job's memory is stopped: the
/// driver gets Ray's out-of-memory error, the cluster goes on (a small task
/// after it runs), and another user's job on the same nodes is untouched.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_lives_in_the_jobs_cgroups_and_a_task_over_the_memory_limit_gets_rays_out_of_memory_error() {
    if !needs_cgroups() {
        return;
    }
    let image = image();
    let dir_b = workdir(user_b(), "oom-neighbour");
    let b = sbatch(user_b(), &dir_b, &["-N2", "--mem=300M"], "#!/bin/bash\nsleep 30\necho NEIGHBOUR OK\n");
    let dir = workdir(user_a(), "oom");
    let script = format!(
        r#"#!/bin/bash
echo READY
{HOLD_THEN}srun --syndeo -N1 -n1 python3 -c '
import ray, time
ray.init()
@ray.remote(max_retries=0)
def hog():
    # Grows without end, at up to ~800 MB/s, as a runaway array does.
    blocks = []
    while True:
        blocks.append(bytearray(16 << 20))
        time.sleep(0.02)
try:
    ray.get(hog.remote())
    print("HOG FINISHED")
except Exception as e:
    print("HOG", type(e).__name__)
print("AFTER", ray.get(ray.remote(lambda: 42).remote()))
'
"#
    );
    let job = sbatch(user_a(), &dir, &["-N2", "--mem=1500M", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id, b.id]);
    job.wait_line("READY", Duration::from_secs(300));
    let (uid, _) = user_ids(user_a());
    let procs = marked_processes(job.id);
    assert!(procs.len() >= 6, "{procs:?}");
    for pid in &procs {
        let Ok(cg) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { continue };
        let what = proc_cmdline(*pid);
        for ctl in ["memory", "freezer"] {
            let line =
                cg.lines().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == ctl))).unwrap_or("");
            assert!(
                line.contains(&format!("/uid_{uid}/job_{}/step_extern", job.id)),
                "{pid} {what}: {ctl} cgroup {line}"
            );
        }
    }
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    assert_eq!(b.wait(Duration::from_secs(120)), "COMPLETED", "{}", b.output());
    let out = job.stdout();
    assert!(out.contains("HOG OutOfMemoryError"), "the driver did not get Ray's out-of-memory error: {}", job.output());
    assert!(out.contains("AFTER 42"), "the cluster did not go on: {}", job.output());
    assert!(b.stdout().contains("NEIGHBOUR OK"), "{}", b.output());
    assert!(drained_nodes().is_empty(), "drained: {:?}", drained_nodes());
}

/// Ray's CPUs and memory on each node are what the job's cgroup allows
/// there, and a task's CPUs lie inside the job's cpuset.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_gets_the_cpus_and_memory_of_the_jobs_cgroup_and_tasks_run_on_the_jobs_cpus() {
    if !needs_cgroups() {
        return;
    }
    let image = image();
    let dir = workdir(user_a(), "cpuset");
    let script = format!(
        r#"#!/bin/bash
echo READY
{HOLD_THEN}srun --syndeo -N1 -n1 python3 -c '
import ray, socket
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
for n in ray.nodes():
    if n["Alive"]:
        r = n["Resources"]
        print("NODE", n["NodeManagerHostname"], int(r["CPU"]), (int(r["memory"]) + int(r["object_store_memory"])) >> 20)
def cpus():
    return socket.gethostname() + " " + [l for l in open("/proc/self/status") if l.startswith("Cpus_allowed_list")][0].split()[1]
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
for line in ray.get([ray.remote(cpus).options(scheduling_strategy=On(n, soft=False)).remote() for n in alive]):
    print("TASK_CPUS", line)
'
"#
    );
    let job = sbatch(user_a(), &dir, &["-N3", "--mem=1200M", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("READY", Duration::from_secs(300));
    let (uid, _) = user_ids(user_a());
    let cpusets: Vec<(String, String)> = nodes()
        .iter()
        .map(|n| {
            (
                n.clone(),
                text(&run(&["cat", &format!("{}/cpuset.cpus", job_cgroup("cpuset", n, uid, job.id))]))
                    .trim()
                    .to_string(),
            )
        })
        .collect();
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(300)), "COMPLETED", "{}", job.output());
    let out = job.stdout();
    for (node, cpuset) in &cpusets {
        let n = cpuset
            .split(',')
            .map(|r| r.split_once('-').map_or(1, |(a, b)| b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1))
            .sum::<u32>();
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("NODE {node} ")))
            .unwrap_or_else(|| panic!("no NODE line for {node}: {out}"));
        assert_eq!(
            line,
            format!("NODE {node} {n} 1200"),
            "Ray's CPUs or memory on {node} are not the job cgroup's ({cpuset})"
        );
        let task = out.lines().find_map(|l| l.strip_prefix(&format!("TASK_CPUS {node} "))).unwrap_or("missing");
        assert_eq!(task, cpuset, "a task on {node} may run outside the job's cpuset");
    }
}

/// `sstat` on the job's extern step (where the cluster lives) shows the CPU
/// time Ray's tasks used; Slurm accounts for them as for the job's own.
/// Each task burns 8 s of its own CPU time, not of the clock: the nodes'
/// one-CPU cpusets may be the same core of the machine, and two tasks spinning
/// 8 s by the clock there used 8 to 9 s of CPU between them.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn sstat_on_the_extern_step_shows_the_cpu_time_of_rays_tasks() {
    if !needs_cgroups() {
        return;
    }
    let image = image();
    let dir = workdir(user_a(), "sstat");
    let script = format!(
        r#"#!/bin/bash
srun --syndeo -N1 -n1 python3 -c '
import ray, time
ray.init()
@ray.remote
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
ray.get([burn.remote(8) for _ in range(2)])
print("BURNED")
'
{HOLD_THEN}"#
    );
    let job = sbatch(user_a(), &dir, &["-N2", &format!("--syndeo={image}")], &script);
    let _cancel = CancelOnDrop(vec![job.id]);
    job.wait_line("BURNED", Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(6)); // JobAcctGatherFrequency=task=5
    let o = run(&[
        "sstat",
        "-a",
        "--noheader",
        "--parsable2",
        "-j",
        &format!("{}.extern", job.id),
        "-o",
        "JobID,TresUsageInTot",
    ]);
    write_file(user_a(), &dir.join("go"), "");
    job.wait(Duration::from_secs(180));
    let t = text(&o);
    let cpu_secs = t.split([',', '|', '\n']).find_map(|f| f.strip_prefix("cpu=")).map(parse_slurm_time).unwrap_or(0);
    assert!(cpu_secs >= 10, "the extern step accounts {cpu_secs} s of CPU for 16 s of Ray tasks: {t}");
}

/// "[D-]HH:MM:SS" or "MM:SS" (Slurm's elapsed time), in seconds.
fn parse_slurm_time(t: &str) -> u64 {
    let (days, rest) = t.split_once('-').map_or((0, t), |(d, r)| (d.parse().unwrap_or(0), r));
    let secs = rest.split(':').fold(0f64, |acc, p| acc * 60.0 + p.parse::<f64>().unwrap_or(0.0));
    days * 86400 + secs as u64
}

/// At job end Slurm's own proctrack ends syndeo's processes with the job's;
/// the epilog still cleans the files; nothing is left and the job's cgroups
/// are gone on every node.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn at_job_end_slurm_reaps_every_syndeo_process_and_the_jobs_cgroups_are_gone() {
    if !needs_cgroups() {
        return;
    }
    let image = image();
    let dir = workdir(user_a(), "reaped");
    let job = sbatch(user_a(), &dir, &["-N3", &format!("--syndeo={image}")], "#!/bin/bash\necho READY\nsleep 300\n");
    job.wait_line("READY", Duration::from_secs(300));
    let (uid, _) = user_ids(user_a());
    run(&["scancel", &job.id.to_string()]);
    job.wait(Duration::from_secs(180));
    assert!(marked_processes(job.id).is_empty(), "{:?}", marked_processes(job.id));
    let left = leftovers(job.id, user_a());
    assert!(left.is_empty(), "job {} left: {left:#?}", job.id);
    // The job's end is recorded before slurmd's stepds have removed its
    // cgroups: each is given CGROUP_REMOVAL to go.
    for node in nodes() {
        for ctl in ["memory", "freezer", "cpuset", "devices"] {
            let path = job_cgroup(ctl, &node, uid, job.id);
            let deadline = std::time::Instant::now() + CGROUP_REMOVAL;
            while std::path::Path::new(&path).exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            assert!(!std::path::Path::new(&path).exists(), "{path} is left {CGROUP_REMOVAL:?} after the job ended");
        }
    }
}

/// How long Slurm may take, after a job's end is recorded, to remove its
/// cgroups (a stepd removes them as it exits, on a loaded machine seconds later).
const CGROUP_REMOVAL: Duration = Duration::from_secs(30);

/// Submitted with its own limits and umask, the job's syndeo processes
/// (agent, Ray) get the same as its batch script, not slurmd's; and Slurm's
/// oom_score_adj for tasks (slurmd's own is -1000).
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn syndeo_processes_have_the_jobs_limits_umask_and_oom_score_adj_not_slurmds() {
    let image = image();
    let dir = workdir(user_a(), "limits");
    write_file(user_a(), &dir.join("job.sh"), "#!/bin/bash\necho SCRIPT_PID $$\nsleep 300\n");
    let submit =
        format!("ulimit -Sn 777; ulimit -Sc 0; umask 027; sbatch --parsable -N2 -o job.out --syndeo={image} job.sh");
    let o = as_user(user_a(), &dir, &["bash", "-c", &submit]);
    assert!(o.status.success(), "{}", text(&o));
    let job = Job { id: String::from_utf8_lossy(&o.stdout).trim().parse().unwrap(), dir: dir.clone() };
    let _cancel = CancelOnDrop(vec![job.id]);
    let script: i32 = job.wait_line("SCRIPT_PID ", Duration::from_secs(300)).trim().parse().unwrap();
    let limit = |pid: i32, name: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/limits"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().rev().skip(1).take(2).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let umask = |pid: i32| proc_status(pid, "Umask").unwrap_or_default();
    let oom =
        |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap_or_default().trim().to_string();
    let want = (limit(script, "Max open files"), limit(script, "Max core file size"), umask(script), oom(script));
    assert_eq!(umask(script), "0027", "the batch script itself: {want:?}");
    // The agents carry the job's limits as given; Ray's daemons raise their
    // own soft descriptor limit to the hard one, so of theirs the hard limit,
    // the umask and oom_score_adj must match.
    let marked = marked_processes(job.id);
    let agents: Vec<i32> =
        marked.iter().copied().filter(|&p| proc_cmdline(p).starts_with("syndeo-agent serve")).collect();
    let raylets: Vec<i32> = marked.iter().copied().filter(|&p| proc_cmdline(p).contains("/raylet/raylet")).collect();
    assert!(agents.len() == 2 && raylets.len() == 2, "{agents:?} {raylets:?}");
    let hard = |l: String| l.split_whitespace().next().unwrap_or_default().to_string();
    let mut got: Vec<(i32, (String, String, String, String))> = agents
        .iter()
        .map(|&p| (p, (limit(p, "Max open files"), limit(p, "Max core file size"), umask(p), oom(p))))
        .collect();
    got.extend(
        raylets
            .iter()
            .map(|&p| (p, (hard(limit(p, "Max open files")), limit(p, "Max core file size"), umask(p), oom(p)))),
    );
    let want_raylet = (hard(want.0.clone()), want.1.clone(), want.2.clone(), want.3.clone());
    run(&["scancel", &job.id.to_string()]);
    job.wait(Duration::from_secs(180));
    for (pid, g) in got {
        let expected = if agents.contains(&pid) { &want } else { &want_raylet };
        assert_eq!(&g, expected, "{pid}: not the job's limits, umask or oom_score_adj");
    }
}
