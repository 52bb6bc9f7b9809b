#!/usr/bin/env python3
"""Where Ray's workers spend their CPU, syndeo's side against the bare side,
during a throughput run of bench/run (by hand; BENCHMARKS.md "Where the
throughput gap goes").

    bench/profile_workers.py record OUT FIRST LAST &
    SYNDEO_MINICLUSTER=0 bench/run --only-throughput --tput-reps 1 --tput-rounds 16
    bench/profile_workers.py report OUT [IMAGE_ROOT]

`record` (as root) waits for the run's round FIRST to begin, samples the
whole machine with `perf record` (cpu-clock, 997 Hz) until both sides have
finished round LAST, notes each process of the bench's user (its command
name and Slurm cgroup: syndeo's Ray runs in the job's extern step, the bare
cluster in the job's other steps), and counts the tasks each worker ran in
the window (Ray's `:task_name:` marker lines in the worker's stdout file)
with its context switches, nice value and autogroup.

`report` prints each worker's CPU per task by node and side, the
workers' CPU per 1,000 tasks by shared object and the symbols whose share
differs most, and the processes and threads started in the window (a
second `perf record` of the scheduler's fork and exec events) by the side
and command of their parent. IMAGE_ROOT (the image's directory) resolves the symbols of
the image's libraries, which sit in the containers' mounts.
"""
import collections
import glob
import os
import pwd
import re
import signal
import subprocess
import sys
import time

USER = "syndeo-a"
MARK = b":task_name:"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def user_pids(uid):
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    yield int(d)
            except OSError:
                pass


def cgroup(pid):
    m = re.search(r"slurm_node\d+/uid_\d+/job_\d+/step_[a-z0-9]+", read(f"/proc/{pid}/cgroup"))
    return m.group(0) if m else ""


def workers(uid):
    """pid -> (tasks so far, voluntary and involuntary switches, nice, autogroup)."""
    out = {}
    for pid in user_pids(uid):
        if not read(f"/proc/{pid}/comm").startswith("ray::IDLE"):
            continue
        try:
            with open(f"/proc/{pid}/fd/1", "rb") as f:
                tasks = f.read().count(MARK)
        except OSError:
            continue
        status = read(f"/proc/{pid}/status")
        switches = [int(re.search(rf"^{k}:\s+(\d+)", status, re.M).group(1))
                    for k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")]
        nice = read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[16]
        out[pid] = [tasks, *switches, nice, read(f"/proc/{pid}/autogroup").strip().replace(" ", "_")]
    return out


def record(out, first, last):
    uid = pwd.getpwnam(USER).pw_uid
    os.makedirs(out, exist_ok=True)
    run = None
    while run is None:
        for d in glob.glob(f"{pwd.getpwnam(USER).pw_dir}/**/bench/tput-*/", recursive=True):
            if glob.glob(f"{d}go-*-{first}"):
                run = d
        time.sleep(0.05)
    perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "997", "-a", "-o", f"{out}/perf.data"])
    forks = subprocess.Popen(["perf", "record", "-q", "-e", "sched:sched_process_fork", "-e", "sched:sched_process_exec",
                              "-a", "-o", f"{out}/forks.data"])
    start, seen = workers(uid), {}
    while not all(os.path.exists(f"{run}done-{side}-{last}") for side in ("syndeo", "bare")):
        for pid in user_pids(uid):
            if pid not in seen:
                seen[pid] = (read(f"/proc/{pid}/comm").strip(), cgroup(pid))
        time.sleep(0.2)
    perf.send_signal(signal.SIGINT)
    forks.send_signal(signal.SIGINT)
    end = workers(uid)
    perf.wait()
    forks.wait()
    with open(f"{out}/processes", "w") as f:
        f.writelines(f"{pid}|{comm}|{cg}\n" for pid, (comm, cg) in seen.items())
    with open(f"{out}/workers", "w") as f:
        for pid in start.keys() & end.keys():
            f.write(" ".join(map(str, [pid, *start[pid], *end[pid]])) + "\n")
    print(f"profile_workers: rounds {first}-{last} of {run}, {len(seen)} processes, {out}/perf.data")


def side_of(cg):
    return "syndeo" if cg.endswith("step_extern") else "bare"


def report(out, image_root=None):
    procs = {}
    for line in open(f"{out}/processes"):
        pid, comm, cg = line.rstrip("\n").split("|")
        if cg:
            procs[int(pid)] = (comm, cg)
    args = ["perf", "script", "-i", f"{out}/perf.data", "-F", "pid,ip,sym,dso", "--kallsyms", "/proc/kallsyms"]
    if image_root:
        args += ["--symfs", image_root]
    samples = collections.Counter()
    by_dso, by_sym = collections.Counter(), collections.Counter()
    for line in subprocess.run(args, capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+[0-9a-f]+\s+(.*?)\s*\((.*)\)\s*$", line)
        if not m or int(m.group(1)) not in procs or not procs[int(m.group(1))][0].startswith("ray::IDLE"):
            continue
        pid = int(m.group(1))
        side, dso = side_of(procs[pid][1]), m.group(3).split("/")[-1]
        samples[pid] += 1
        by_dso[(side, dso)] += 1
        by_sym[(side, f"{dso}:{m.group(2)}")] += 1
    tasks = collections.Counter()
    print("| side | node | worker | ms of CPU per task | voluntary / involuntary switches per task | nice | autogroup |")
    print("|---|---|---|---|---|---|---|")
    per_node = collections.defaultdict(lambda: [0, 0])
    for line in sorted(open(f"{out}/workers"), key=lambda l: procs.get(int(l.split()[0]), ("", ""))[1]):
        f = line.split()
        pid = int(f[0])
        if pid not in procs:
            continue
        n, vol, invol = (int(f[6 + i]) - int(f[1 + i]) for i in range(3))
        if n <= 0:
            continue
        side, node = side_of(procs[pid][1]), procs[pid][1].split("/")[0]
        tasks[side] += n
        per_node[(side, node)][0] += samples[pid]
        per_node[(side, node)][1] += n
        print(f"| {side} | {node} | {pid} | {samples[pid] / n:.3f} | {vol / n:.2f} / {invol / n:.2f} | {f[9]} | {f[10]} |")
    print("\n| node | syndeo, ms per task | bare | syndeo/bare |\n|---|---|---|---|")
    for node in sorted({n for _, n in per_node}):
        s, b = (per_node[(side, node)][0] / max(per_node[(side, node)][1], 1) for side in ("syndeo", "bare"))
        print(f"| {node} | {s:.3f} | {b:.3f} | {s / b if b else 0:.2f} |")
    scale = {side: 1000.0 / max(tasks[side], 1) for side in ("syndeo", "bare")}
    print("\n| workers' CPU by shared object, ms per 1,000 tasks | syndeo | bare | syndeo/bare |\n|---|---|---|---|")
    for dso in sorted({d for _, d in by_dso}, key=lambda d: -by_dso[("bare", d)]):
        s, b = by_dso[("syndeo", dso)] * scale["syndeo"], by_dso[("bare", dso)] * scale["bare"]
        if s + b >= 2:
            print(f"| {dso} | {s:.1f} | {b:.1f} | {s / b if b else 0:.2f} |")
    print("\nsymbols whose share differs most (ms per 1,000 tasks: syndeo, bare):")
    syms = {sym for _, sym in by_sym}
    diff = lambda sym: by_sym[("syndeo", sym)] * scale["syndeo"] - by_sym[("bare", sym)] * scale["bare"]
    for sym in sorted(syms, key=lambda sym: -abs(diff(sym)))[:15]:
        print(f"{by_sym[('syndeo', sym)] * scale['syndeo']:7.1f} {by_sym[('bare', sym)] * scale['bare']:7.1f}  {sym[:150]}")

    print("\nprocesses and threads started in the window, by the parent's side and command (and what the child ran):")
    # PID/TID before each event: the parent's PID (its process, whose cgroup
    # `processes` holds), where the event's own pid= is the forking thread's.
    trace = subprocess.run(["perf", "script", "-i", f"{out}/forks.data", "-F", "comm,pid,tid,event,trace"],
                           capture_output=True, text=True).stdout
    side_of_pid = lambda pid: side_of(procs[pid][1]) if pid in procs else "other"
    parent, started = {}, collections.Counter()
    for line in trace.splitlines():
        m = re.match(r"\s*(.+?)\s+(\d+)/\d+\s+sched:(\w+): (.*)", line)
        if not m:
            continue
        comm, pid, event, fields = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        if event == "sched_process_fork":
            parent[int(re.search(r"child_pid=(\d+)", fields).group(1))] = (comm, pid)
        elif event == "sched_process_exec":
            comm, ppid = parent.pop(pid, ("?", 0))
            started[(side_of_pid(ppid), comm, os.path.basename(re.search(r"filename=(\S+)", fields).group(1)))] += 1
    for comm, ppid in parent.values():
        started[(side_of_pid(ppid), comm, "(no exec: a thread or a fork)")] += 1
    for (side, comm, ran), n in sorted(started.items(), key=lambda kv: -kv[1])[:30]:
        print(f"{n:6d}  {side:6s}  {comm} -> {ran}")

if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "record":
        record(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    else:
        sys.exit(__doc__)
