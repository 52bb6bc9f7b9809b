//! Slurm's accounting (slurmdbd and MariaDB, on a minicluster brought up with
//! `--accounting`: `tests/run --slurm R --suite site-accounting`): a syndeo
//! job's Ray tasks are charged to the job. Three Ray tasks, one per node,
//! each burn BURN_S seconds of CPU (measured by the task itself) while
//! holding HOLD_MIB of memory; the same
//! work as a plain `srun -N3` job is the reference. The kernel's count for the
//! syndeo job's extern step (its cgroups' cpuacct.usage on every node, where
//! the agent and Ray live under PrologFlags=Contain), less that of the same
//! syndeo job whose tasks burn nothing (Ray's own daemons and workers), is
//! between MIN_SHARE and MAX_SHARE of the reference: the work ran inside the
//! job. `sacct -j N` charges the extern step at least MIN_SHARE of it, and
//! at most SACCT_MAX_SHARE: Slurm's jobacct_gather counts Ray's extern step
//! about twice (measured on 22.05 and 24.11: 136 s in sacct for 70.5 s in the
//! step's cgroups; README, "Accounting"). The held memory shows in the
//! extern step's MaxRSS, over the idle job's, as in the plain job's step
//! (MEM_MIN_SHARE to MEM_MAX_SHARE). Needs Slurm's cgroup plugins (the
//! minicluster's default): without Contain, Ray runs outside the job and
//! nothing of it is accounted (README).
use std::time::{Duration, Instant};

use syndeo_tests::*;

/// CPU seconds each node's task burns.
const BURN_S: f64 = 20.0;
/// The syndeo job must account at least this share of the plain job's CPU.
const MIN_SHARE: f64 = 0.85;
/// ... and its cgroups must count at most this share, once Ray's own CPU
/// (GCS, raylets, workers, measured by an idle job of the same shape) is
/// taken off: the work runs longer than the idle job, and Ray's daemons keep
/// running meanwhile.
const MAX_SHARE: f64 = 1.35;
/// What sacct charges for the work at most, as a share of the plain job's:
/// Slurm's own overcount of the extern step (about 2) with room to spare; far
/// more would mean something of syndeo's is charged that should not be.
const SACCT_MAX_SHARE: f64 = 2.6;

/// "[D-][HH:]MM:SS[.mmm]" (sacct's TotalCPU), in seconds.
fn slurm_seconds(t: &str) -> f64 {
    let t = t.trim();
    if t.is_empty() {
        return 0.0;
    }
    let (days, rest) = t.split_once('-').map_or((0.0, t), |(d, r)| (d.parse().unwrap_or(0.0), r));
    days * 86400.0 + rest.split(':').fold(0.0, |acc, p| acc * 60.0 + p.parse::<f64>().unwrap_or(0.0))
}

/// One line of `sacct -P`: the step's name, its TotalCPU and TRES cpu, and
/// its MaxRSS in MiB.
#[derive(Debug)]
struct Row {
    id: String,
    total_cpu: f64,
    tres_cpu: f64,
    max_rss_mib: f64,
}

/// sacct's "123456K" (or M, G; bare: bytes) in MiB.
fn slurm_mib(v: &str) -> f64 {
    let v = v.trim();
    let (num, scale) = match v.chars().last() {
        Some('K') => (&v[..v.len() - 1], 1.0 / 1024.0),
        Some('M') => (&v[..v.len() - 1], 1.0),
        Some('G') => (&v[..v.len() - 1], 1024.0),
        _ => (v, 1.0 / (1024.0 * 1024.0)),
    };
    num.parse::<f64>().unwrap_or(0.0) * scale
}

/// `sacct -j N` once the job's record is complete (its state final and every
/// step's usage in), polled: slurmctld hands records to slurmdbd on its own time.
fn sacct_rows(job: u32) -> (Vec<Row>, String) {
    let t = Instant::now();
    loop {
        let o = run(&["sacct", "-j", &job.to_string(), "-n", "-P", "-o", "JobID,State,TotalCPU,TRESUsageInTot,MaxRSS"]);
        let out = text(&o);
        let rows: Vec<Row> = out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() >= 5).then(|| Row {
                    id: f[0].to_string(),
                    total_cpu: slurm_seconds(f[2]),
                    tres_cpu: f[3].split(',').find_map(|kv| kv.strip_prefix("cpu=")).map(slurm_seconds).unwrap_or(0.0),
                    max_rss_mib: slurm_mib(f[4]),
                })
            })
            .collect();
        let done = out.lines().next().is_some_and(|l| l.contains("|COMPLETED|"))
            && rows.iter().filter(|r| r.id.contains('.')).all(|r| r.total_cpu > 0.0 || r.tres_cpu > 0.0)
            && rows.iter().any(|r| r.id.contains('.'));
        if done || t.elapsed() > Duration::from_secs(90) {
            return (rows, out);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The CPU seconds `sacct` charges `job`: the sum of its steps' TotalCPU.
fn steps_total(rows: &[Row]) -> f64 {
    rows.iter().filter(|r| r.id.contains('.')).map(|r| r.total_cpu).sum()
}

/// The held memory must show in the extern step's MaxRSS, over Ray's own,
/// within these shares of the plain job step's MaxRSS (Ray's own memory
/// moves by tens of MiB between jobs).
const MEM_MIN_SHARE: f64 = 0.75;
const MEM_MAX_SHARE: f64 = 1.5;
/// MiB each node's task holds (every page written) while it burns.
const HOLD_MIB: u32 = 300;
/// Memory for each job on each node: Ray's own (about 500 MiB a node) and
/// the held memory fit.
const JOB_MEM: &str = "--mem=2000M";

const BURN: &str = r#"
import socket, time
def burn(s, mib):
    held = bytearray(mib << 20)
    held[::4096] = b"\x01" * len(held[::4096])
    # The clock is read once per 200k steps: a CPU clock read is a system
    # call, far dearer in a many-threaded Ray worker than in a plain python.
    t0 = time.process_time()
    while time.process_time() - t0 < s:
        for _ in range(200000):
            pass
    return socket.gethostname(), time.process_time() - t0
"#;

#[test]
#[ignore = "needs the minicluster with --accounting (tests/run)"]
fn a_syndeo_jobs_ray_tasks_show_in_sacct_within_the_margin_of_the_same_work_in_a_plain_srun_job() {
    assert!(
        accounting_mode(),
        "no slurmdbd: bring the minicluster up with `tests/cluster/minicluster up --accounting`"
    );
    if !cgroup_mode() {
        eprintln!("the minicluster runs without Slurm's cgroup plugins: Ray runs outside the job, nothing to compare");
        return;
    }
    let image = image();

    // The reference: the same burn as a plain job's tasks, one per node.
    let dir = workdir(user_a(), "acct-plain");
    write_file(user_a(), &dir.join("burn.py"), &format!("{BURN}\nprint('BURNED', *burn({BURN_S}, {HOLD_MIB}))\n"));
    let plain = sbatch(user_a(), &dir, &["-N3", JOB_MEM], "#!/bin/bash\nsrun -N3 -n3 python3 burn.py\n");
    assert_eq!(plain.wait(Duration::from_secs(300)), "COMPLETED", "{}", plain.output());
    assert_eq!(plain.lines("BURNED ").len(), 3, "{}", plain.output());

    // Ray's own CPU over such a job: the same job with tasks that burn nothing.
    let (idle, _, idle_kernel) = syndeo_burn_job(&image, "acct-idle", 0.0, 0);
    // The same work as Ray tasks, one pinned to each node.
    let (job, burned, kernel) = syndeo_burn_job(&image, "acct-syndeo", BURN_S, HOLD_MIB);
    assert!(burned >= 3.0 * BURN_S * 0.99, "the tasks burned {burned} s: {}", job.output());

    let (plain_rows, plain_out) = sacct_rows(plain.id);
    let (rows, out) = sacct_rows(job.id);
    let reference = steps_total(&plain_rows);
    let charged = steps_total(&rows);
    let ext = rows.iter().find(|r| r.id.ends_with(".extern"));
    eprintln!(
        "plain job {}: {reference:.1} s; syndeo job {}: {charged:.1} s (extern step: {ext:?}); tasks measured {burned:.1} s",
        plain.id, job.id
    );
    let shown = format!("plain job:\n{plain_out}\nsyndeo job:\n{out}");
    assert!(
        reference >= 3.0 * BURN_S * 0.9,
        "the plain job is charged {reference} s for {} s of work:\n{shown}",
        3.0 * BURN_S
    );
    let ext = ext.unwrap_or_else(|| panic!("no extern step in sacct:\n{shown}"));
    assert!(
        ext.total_cpu >= MIN_SHARE * 3.0 * BURN_S,
        "the extern step (the agent and Ray) is charged {} s of TotalCPU (TRES cpu {} s) for {burned:.1} s of Ray tasks:\n{shown}",
        ext.total_cpu,
        ext.tres_cpu
    );
    let (idle_rows, idle_out) = sacct_rows(idle.id);
    let overhead = steps_total(&idle_rows);
    let work = charged - overhead;
    let kernel_work = kernel - idle_kernel;
    eprintln!(
        "Ray's own CPU (idle job {}): {overhead:.1} s in sacct, {idle_kernel:.1} s in its cgroups; the work: \
         {work:.1} s in sacct, {kernel_work:.1} s in the cgroups ({kernel:.1} s in all)",
        idle.id
    );
    assert!(
        kernel_work >= MIN_SHARE * reference && kernel_work <= MAX_SHARE * reference,
        "the syndeo job's extern step used {kernel:.1} s by its cgroups, {idle_kernel:.1} s of it Ray's own (the idle \
         job), so {kernel_work:.1} s for the work the plain job is charged {reference:.1} s for (margin: {MIN_SHARE} to \
         {MAX_SHARE}):\n{shown}\nidle job:\n{idle_out}"
    );
    assert!(
        work >= MIN_SHARE * reference && work <= SACCT_MAX_SHARE * reference,
        "the syndeo job is charged {charged:.1} s, {overhead:.1} s of it Ray's own (the idle job), so {work:.1} s for \
         the work the plain job is charged {reference:.1} s for (margin: {MIN_SHARE} to {SACCT_MAX_SHARE}):\n{shown}\nidle job:\n{idle_out}"
    );
    // Memory: what the tasks held shows in the extern step's MaxRSS (over
    // what Ray's own takes, the idle job's) as in the plain job's step.
    let max_rss = |rows: &[Row], step: &str| {
        rows.iter().filter(|r| r.id.ends_with(step)).map(|r| r.max_rss_mib).fold(0.0, f64::max)
    };
    let plain_mem = max_rss(&plain_rows, ".0");
    let (mem, idle_mem) = (max_rss(&rows, ".extern"), max_rss(&idle_rows, ".extern"));
    let mem_work = mem - idle_mem;
    eprintln!(
        "MaxRSS: plain step {plain_mem:.0} MiB; extern step {mem:.0} MiB, {idle_mem:.0} MiB of it Ray's own (idle job)"
    );
    assert!(
        plain_mem >= f64::from(HOLD_MIB),
        "the plain job's step shows {plain_mem:.0} MiB for {HOLD_MIB} MiB held:\n{shown}"
    );
    assert!(
        mem_work >= MEM_MIN_SHARE * plain_mem && mem_work <= MEM_MAX_SHARE * plain_mem,
        "the extern step's MaxRSS is {mem:.0} MiB, {idle_mem:.0} MiB of it Ray's own (the idle job), so {mem_work:.0} MiB \
         for what the plain job's step shows as {plain_mem:.0} MiB (margin: {MEM_MIN_SHARE} to {MEM_MAX_SHARE}):\n{shown}\nidle job:\n{idle_out}"
    );
}

/// CPU seconds the kernel counts for `job`'s extern step: the sum over its
/// nodes of the step's cgroup cpuacct.usage (nanoseconds).
fn extern_step_cpu(job: &Job) -> f64 {
    let (uid, _) = user_ids(user_a());
    job.nodes()
        .iter()
        .map(|node| {
            let path = format!("{}/step_extern/cpuacct.usage", job_cgroup("cpuacct", node, uid, job.id));
            let ns: f64 = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{path}: {e}"))
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            ns / 1e9
        })
        .sum()
}

/// A syndeo job on 3 nodes whose Ray tasks, one pinned to each node, burn
/// `seconds` of CPU each: the job, the CPU seconds its tasks measured, and
/// the kernel's count for its extern step once the tasks are done.
fn syndeo_burn_job(image: &str, name: &str, seconds: f64, mib: u32) -> (Job, f64, f64) {
    let dir = workdir(user_a(), name);
    let driver = format!(
        r#"{BURN}
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init()
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
done = ray.get([ray.remote(num_cpus=1)(burn).options(scheduling_strategy=On(n, soft=False)).remote({seconds}, {mib}) for n in nodes])
for host, cpu in done:
    print("BURNED", host, cpu)
"#
    );
    write_file(user_a(), &dir.join("driver.py"), &driver);
    // The job waits (for `go`) while the test reads its cgroups; the pause
    // lets Slurm's accounting poll (JobAcctGatherFrequency=task=5) see the
    // extern step's usage before the job ends.
    let script = "#!/bin/bash\nsrun --syndeo -N1 -n1 python3 driver.py\necho MEASURE\n\
                  for i in $(seq 1200); do [ -e go ] && break; sleep 0.25; done\nsleep 12\n";
    let job = sbatch(user_a(), &dir, &["-N3", JOB_MEM, &format!("--syndeo={image}")], script);
    job.wait_line("MEASURE", Duration::from_secs(400));
    let kernel = extern_step_cpu(&job);
    write_file(user_a(), &dir.join("go"), "");
    assert_eq!(job.wait(Duration::from_secs(120)), "COMPLETED", "{}", job.output());
    let burned = job.lines("BURNED ").iter().filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()).sum();
    (job, burned, kernel)
}
