"""syndeo's benchmarks on the minicluster, each side by side with a peer in
the same run (started by bench/run, which prepares the cluster and the
image). The cluster is the one SYNDEO_MINICLUSTER names (0 by default); the
bench reaches it only through syndeo-mc, the minicluster's one client (the
integration tests' library as a command: `mc`). Every peer runs the image's
own Python and Ray, from the image's root filesystem without syndeo
(`in_image`): a ratio compares syndeo with the same interpreter and Ray.
Absolute times on a shared 2-core machine are noise; the ratios measured in
one run are the result.

1. Cluster-ready time, 3 nodes, job start -> truly ready (`ray status` lists
   all 3 nodes active, which is when syndeo starts the job's steps):
   syndeo | bare `ray start` (head, then workers; the floor) |
   `ray symmetric-run` under srun | the sleep-based sbatch template of Ray's docs,
   in interleaved order, each ratio the median of per-repetition ratios.
2. Teardown: epilog start -> node clean (syndeo), SIGTERM -> no process (bare).
3. Cost to jobs without --syndeo: `srun true` with and without the plugin.
4. Ray task throughput: syndeo's container vs bare Ray on the same nodes,
   both up at once, their drivers taking turns.
5. Mesh scale: simulated nodes' agents on loopback, Ray replaced by a no-op.
"""
import argparse
import atexit
import collections
import datetime
import functools
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")

# The minicluster, the one SYNDEO_MINICLUSTER names (0 by default), as its one
# client says: syndeo-mc (tests/src/bin/syndeo-mc.rs, the integration tests'
# library as a command; bench/run builds it and passes --mc). Set by connect().
MC_CLIENT = None
FACTS = {}  # `syndeo-mc facts`
USER = None  # the cluster's first test user: the bench's jobs and processes are theirs
WORK = None  # the bench's directory of USER's, fresh each run (syndeo-mc workdir)
NODES = []
IP = {}  # each node's address on the cluster's bridge
# The release's root on the host ("" when the release is the host's own):
# syndeo's files and Slurm's config are under it.
ROOT = ""
NODE_ARGV = {}  # per node, the argv prefix of as_user_in (syndeo-mc node-argv); new after each restart
SLURM_ARGV = []  # the argv prefix that runs a Slurm client as USER in WORK (syndeo-mc slurm-argv); likewise
JOBS = {}  # per job id, what `syndeo-mc sbatch` said: its stdout and stderr files


def mc(*args, stdin=None, check=True):
    """syndeo-mc ARGS (stdin: its input); its stdout. A failure ends the bench
    with what syndeo-mc said, unless check is False."""
    r = subprocess.run([MC_CLIENT, *map(str, args)], input=stdin, capture_output=True, text=True,
                       encoding="utf-8", errors="replace")
    if check and r.returncode != 0:
        raise SystemExit(f"bench: syndeo-mc {shlex.join(map(str, args))} failed: {r.stdout}{r.stderr}")
    return r.stdout


def connect(client):
    """Learns the cluster from syndeo-mc at `client`, and makes WORK."""
    global MC_CLIENT, FACTS, USER, WORK, NODES, IP, ROOT
    MC_CLIENT = client
    FACTS = json.loads(mc("facts"))
    USER = FACTS["users"][0]
    NODES = [n["name"] for n in FACTS["nodes"]]
    IP = {n["name"]: n["addr"] for n in FACTS["nodes"]}
    ROOT = FACTS["root_prefix"]
    WORK = user_dir("")
    refresh_argvs()


def user_dir(name):
    """A fresh directory of USER's: WORK itself for "", else NAME in it."""
    return mc("workdir", USER, os.path.join("bench", name).rstrip("/")).strip()


def refresh_argvs():
    """as_user_in's argv prefix for every node and the Slurm clients', asked
    before anything is timed, and again after Slurm restarts (they name
    slurmd's and slurmctld's PIDs)."""
    NODE_ARGV.clear()
    NODE_ARGV.update({n: json.loads(mc("node-argv", n, USER)) for n in NODES})
    SLURM_ARGV[:] = json.loads(mc("slurm-argv", USER, WORK))


def home():
    return FACTS["homes"][USER]


def cluster_config():
    """The running minicluster's Slurm release, syndeo's runtime, and whether
    Slurm's cgroup plugins are on: the figures hold for this configuration."""
    cgroups = "cgroups" if FACTS["cgroups"] else "no cgroups"
    return {"release": FACTS["release"], "runtime": FACTS["runtime"], "cgroups": cgroups}


# The peers' last step to the point syndeo calls ready: Ray's own status (what
# `ray status` prints, from the GCS at argv[1]) lists argv[2] nodes active.
# Every peer runs with AUTOSCALER_UPDATE_INTERVAL_S=1, as syndeo's Ray does.
READY_PY = r"""
import json, sys, time
from ray._raylet import GcsClient
client, n = GcsClient(address=sys.argv[1]), int(sys.argv[2])
while True:
    try:
        s = client.internal_kv_get(b"__autoscaling_status", None, timeout=2)
        if s and sum((json.loads(s).get("autoscaler_report") or {}).get("active_nodes", {}).values()) >= n:
            break
    except Exception:
        pass
    time.sleep(0.05)
print("T_READY", time.time(), flush=True)
"""

TPUT_PY = r"""
# One driver of the throughput benchmark: SIDE's, against the Ray cluster of
# its environment. It warms up, says ready, then runs one round of 2,000
# empty tasks each time the bench drops go-SIDE-K into DIR, and writes
# done-SIDE-K with the round's rate. The two sides' rounds never overlap, and
# neither driver ends (Ray's teardown of its job: the driver's exit, its
# workers ended and new ones started) before the bench drops `rounds-over`:
# else the side that went first in the last round would end inside the
# other's, and its teardown would count as the other side's CPU.
import os, sys, time, ray
side, d, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
ray.init()
@ray.remote(num_cpus=1)
def f():
    return 0
# A whole round's worth first: a side's first 2,000 tasks start threads in
# its workers (about 100 per 3-node cluster, by a fork trace) that 200 tasks
# did not, and they fell in the first measured round.
ray.get([f.remote() for _ in range(2000)])
def put(name, text):
    with open(os.path.join(d, name + ".tmp"), "w") as fh:
        fh.write(text)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))
put(side + ".ready", "")
for k in range(rounds):
    while not os.path.exists(os.path.join(d, f"go-{side}-{k}")):
        time.sleep(0.005)
    t = time.time()
    ray.get([f.remote() for _ in range(2000)])
    put(f"done-{side}-{k}", repr(2000 / (time.time() - t)))
while not os.path.exists(os.path.join(d, "rounds-over")):
    time.sleep(0.05)
"""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def write_user_file(name, content, d=None):
    """NAME in WORK (or in `d`), with `content`, owned by USER."""
    path = os.path.join(d or WORK, name)
    mc("write-file", USER, path, stdin=content)
    return path


@functools.lru_cache(maxsize=None)
def node_gpus(node):
    """The GPUs Slurm counts on `node` (its Gres, e.g. gpu:standin:2). An
    --exclusive job gets them all, and syndeo gives them to Ray; Ray then
    keeps CPU-only tasks off GPU nodes where it can (its scheduler's
    avoid-GPU-nodes rule), so bare Ray is given as many."""
    gres = mc("node-field", node, "Gres").strip()
    m = re.search(r"gpu(?::[^:,()]+)?:(\d+)", gres)
    return int(m.group(1)) if m else 0


def node_cpus():
    """The CPUs Slurm counts on a node. Every side gets all of them: Slurm's
    jobs run --exclusive (with cgroups, a job of 1 CPU a node is confined to
    one core, while bare Ray would use them all) and bare Ray is given as
    many --num-cpus."""
    cpus = mc("node-field", NODES[0], "CPUTot").strip()
    return int(cpus) if cpus.isdigit() else 1


def submit(args, script, d=None):
    """sbatch --exclusive ARGS, the script as USER in `d` (by default a fresh
    directory of the job's own: its output files are always job.out and
    job.err, syndeo-mc sbatch); the job's id."""
    d = d or user_dir(f"job-{secrets.token_hex(3)}")
    job = json.loads(mc("sbatch", USER, d, "--exclusive", *args, stdin=script))
    JOBS[job["id"]] = job
    return job["id"]


def job_state(jid):
    return mc("state", jid).strip()


def wait_job(jid, limit=600):
    """The job's final state once it is over and its epilogs ran on every
    node (syndeo's record goes last); a job still running after `limit`
    seconds is cancelled and ends the bench."""
    return mc("wait", jid, limit, os.path.dirname(JOBS[jid]["stdout"])).strip()


def job_out(jid):
    def rd(p):
        try:
            return open(p).read()
        except OSError:
            return ""
    return rd(JOBS[jid]["stdout"]), rd(JOBS[jid]["stderr"])


# ------------------------------------------- the peers' Python and Ray

# Where the image (tests/image/build) has them: Debian's python3 in
# /usr/bin, and Ray installed by pip as root, /usr/local/bin/ray with its
# package in /usr/local/lib/python3.X/dist-packages.
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Bound read-only from the node so that the user's name, the node names and
# DNS resolve inside, as syndeo's bubblewrap runtime binds them
# (node-agent/src/runtime/bubblewrap.rs).
HOST_FILES = ["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf"]


def image_root(image):
    """The image's root filesystem directory: the image itself, or for a SIF
    the directory it was built from (`minicluster image`: the SIF's path
    without `.sif`), which holds the same files."""
    root = image[:-len(".sif")] if image.endswith(".sif") else image
    if not os.path.isdir(os.path.join(root, "usr")):
        raise SystemExit(f"bench: no root filesystem at {root} (the peers' image, for {image})")
    return root


SIF_PEERS = "/tmp/sif-peers"  # on each node, in its own /tmp (--peers-from-sif, --peers-from-copies)


def peers_sif_root(sif):
    """By hand (--peers-from-sif): the SIF's squashfs mounted read-only on
    every node, each node its own squashfuse_ll (the node root's, the one
    Apptainer runs) at SIF_PEERS, as Apptainer mounts it for syndeo's
    containers: the peers then read the image through FUSE too. The
    squashfs starts at its magic, the first `hsqs` in the SIF."""
    with open(sif, "rb") as f:
        offset = f.read(64 << 20).find(b"hsqs")
    if offset < 0:
        raise SystemExit(f"bench: no squashfs in {sif}")
    for n in NODES:
        mount_peers_root(n, ["squashfuse_ll", "-o", f"ro,allow_other,offset={offset}", sif])
    return SIF_PEERS


def peers_copies_root(root):
    """By hand (--peers-from-copies): each node's own copy of the image's
    directory (made once, beside it), bound at SIF_PEERS in that node: the
    same files as the directory, in pages of their own on each node, as
    each node's squashfuse mount of a SIF has."""
    for i, n in enumerate(NODES):
        copy = f"{root}.bench-copy-{i}"
        if not os.path.isdir(copy):
            sh(["cp", "-a", root, copy + ".tmp"], check=True)
            os.rename(copy + ".tmp", copy)
        mount_peers_root(n, ["mount", "--bind", "-o", "ro", copy])
    return SIF_PEERS


def mount_peers_root(node, mount_argv):
    """MOUNT_ARGV SIF_PEERS as root in `node` (unmount_peers_roots undoes it)."""
    mc("in-node", node, "--", "mkdir", "-p", SIF_PEERS)
    mc("in-node", node, "--", *mount_argv, SIF_PEERS)


def unmount_peers_roots():
    for n in NODES:
        mc("in-node", n, "--", "umount", SIF_PEERS, check=False)


def peers_image(image, runtime):
    """What the peers run Ray from: with Apptainer and a SIF, the SIF itself
    (in_image runs `apptainer exec` of it, as a user without syndeo would);
    otherwise the image's root filesystem directory (image_root), under
    bubblewrap."""
    return image if runtime == "apptainer" and image.endswith(".sif") else image_root(image)


def in_image(root):
    """The peers' container: the argv prefix that runs a command with the
    image's Python and Ray, as the calling user, without syndeo.

    A SIF (peers_image, with Apptainer): `apptainer --quiet exec SIF`, as a
    user runs Ray from the image without syndeo. Apptainer's defaults bind
    the node's /tmp, /dev (with /dev/shm), /sys, /proc, the home and the
    HOST_FILES, pass the environment on and keep the node's network and PID
    namespace; each container mounts the SIF with its own squashfuse_ll, as
    syndeo's do. Apptainer's starter stays as the command's parent and
    passes on the command's exit (see contained_command).

    A directory: bubblewrap (in every release's root, and what syndeo runs
    Ray with without Apptainer) binds the image read-only as `/`; the node's
    /tmp (Ray's temp dirs, which drivers and clean_bench_dirs find there),
    /dev/shm (the object store), /sys, /home and the HOST_FILES are bound
    over it, and the network and PID namespace stay the node's: all that
    differs from Ray run on the node itself is the files of /usr, /etc and
    the rest. bwrap stays as the command's parent; --die-with-parent: the
    command is killed when bwrap is (see contained_command)."""
    if root.endswith(".sif"):
        return ["apptainer", "--quiet", "exec", root]
    argv = ["/usr/bin/bwrap", "--ro-bind", root, "/", "--dev", "/dev", "--proc", "/proc",
            "--ro-bind", "/sys", "/sys", "--bind", "/tmp", "/tmp", "--bind", "/dev/shm", "/dev/shm",
            "--bind", "/home", "/home"]
    for f in HOST_FILES:
        argv += ["--ro-bind-try", f, f]
    return argv + ["--setenv", "PATH", IMAGE_PATH, "--die-with-parent", "--"]


def peers_how(root):
    """How the peers run, in words, for the logs and BENCHMARKS.md."""
    if root.endswith(".sif"):
        return "from the same SIF with `apptainer exec`"
    return "from its root filesystem with bubblewrap"


def in_image_script(root):
    """in_image(root) as an executable of the user's, for the peers' batch
    scripts: `in-image CMD...` runs CMD in the image on whichever node srun
    (or the batch script) runs it."""
    text = ("#!/bin/sh\n# The image's Python and Ray, without syndeo (bench.py's in_image).\n"
            f'exec {shlex.join(in_image(root))} "$@"\n')
    path = write_user_file("in-image", text)
    os.chmod(path, 0o755)
    return path


def each_process(name):
    """(PID, content of /proc/PID/NAME as bytes) for every process whose file
    could be read."""
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                yield int(p), open(f"/proc/{p}/{name}", "rb").read()
            except OSError:
                continue


def parent(stat):
    """The parent's PID in a /proc/PID/stat: after the command's name (in
    parentheses, which it may hold too), the state, then the parent."""
    return int(stat.rsplit(b")", 1)[1].split()[1])


def children(pid):
    """The PIDs whose parent is `pid`."""
    return [p for p, stat in each_process("stat") if parent(stat) == pid]


# The peers' container processes (in_image), by command name: the command
# each runs is a child of one of them.
CONTAINERS = (b"bwrap", b"starter")
# Apptainer's starter has a second child, the SIF's mount, not the command.
NOT_THE_COMMAND = (b"squashfuse_ll",)


def comm(pid):
    try:
        return open(f"/proc/{pid}/comm", "rb").read().strip()
    except OSError:
        return b""


def contained_command(p):
    """The PID of the command that in_image's container `p` (an as_user_in
    process: bwrap or Apptainer's starter, which nsenter, setpriv and env
    exec in turn) runs: bwrap's one child (without --unshare-pid bwrap forks
    nothing else), or the starter's child that is not the SIF's
    squashfuse_ll. The container's own PID when it has none (any more)."""
    return ([c for c in children(p.pid) if comm(c) not in NOT_THE_COMMAND] or [p.pid])[0]


def peer_versions(root):
    """The image's Ray and Python as the peers get them, on node1 through
    in_image as the user: a check that the container works, before any peer
    is timed."""
    p = as_user_in(NODES[0], [*in_image(root), "python3", "-c",
                              "import ray, sys; print(f'Ray {ray.__version__}, Python {sys.version.split()[0]}')"],
                   {"PATH": "/usr/bin:/bin", "HOME": home()})
    out, _ = p.communicate(timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"bench: the peers' container ({shlex.join(in_image(root))}) failed on {NODES[0]}: {out}")
    return out.strip().splitlines()[-1]


def as_user_in(node, argv, env):
    """A process of USER inside `node`'s namespaces, with only `env`, started
    by PID: NODE_ARGV's prefix (nsenter, setpriv, env -i; no shell)."""
    envv = [f"{k}={v}" for k, v in env.items()]
    cmd = [*NODE_ARGV[node], *envv, *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")


def log_time(line):
    m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\]", line)
    return datetime.datetime.fromisoformat(m.group(1)).timestamp() if m else None


def slurmd_lines(pattern):
    hits = []
    for n in NODES:
        for line in mc("slurmd-log", n).splitlines(keepends=True):
            if pattern in line:
                hits.append((n, line))
    return hits


def processes_with_env(marker):
    return [p for p, env in each_process("environ") if marker.encode() in env.split(b"\0")]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ------------------------------------------------- Apptainer's own start cost

def apptainer_start(image, reps):
    """Seconds for `apptainer exec --contain IMAGE true` as the user in
    node1's namespaces, from the SIF and from the sandbox directory it was
    built from (the image path without `.sif`), taken in turn; and for a
    bare `true` the same way (the floor). Apptainer's state goes to a
    scratch directory, as syndeo's does, not to the user's home."""
    state = user_dir("apptainer-state")
    env = {"PATH": "/usr/bin:/bin", "HOME": WORK, "APPTAINER_CONFIGDIR": state, "APPTAINER_CACHEDIR": state}
    sandbox = image[:-len(".sif")]
    sides = {"sif": ["apptainer", "--quiet", "exec", "--contain", image, "/bin/true"],
             "sandbox": ["apptainer", "--quiet", "exec", "--contain", sandbox, "/bin/true"],
             "bare": ["/bin/true"]}
    times = {k: [] for k in sides}
    for i in range(reps + 2):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            t = time.time()
            p = as_user_in(NODES[0], sides[side], env)
            out, _ = p.communicate()
            took = time.time() - t
            if p.returncode != 0:
                raise SystemExit(f"apptainer start ({side}) failed: {out}")
            if i >= 2:  # the first two of each side warm the page cache
                times[side].append(took)
    shutil.rmtree(state, ignore_errors=True)
    return {k: median(v) for k, v in times.items()}


# What holding the job's ports costs (SECURITY.md §4): every process of Ray's
# container loads syndeo's preload library, whose bind() wrapper sets
# SO_REUSEPORT on a held port. Picking the ports (a bind each, microseconds)
# is not timed.
HELD_BIND_PY = """
import os, socket
port = int(os.environ["SYNDEO_HELD_PORTS"].split(",")[0])
s = socket.socket()
s.bind(("127.0.0.1", port))
s.close()
"""


def preload_cost(root, reps):
    """Milliseconds for a Python of the image (in_image, on node1, as the
    user) to start, bind a held port and exit, with syndeo's preload library
    in LD_PRELOAD and without, taken in turn; (with, without)."""
    lib = os.path.join(WORK, "syndeo-preload.so")
    shutil.copy(f"{ROOT}/usr/libexec/syndeo/syndeo-preload.so", lib)
    os.chmod(lib, 0o644)
    held = ",".join(str(29000 + i) for i in range(9))
    env = {"PATH": "/usr/bin:/bin", "HOME": home(), "SYNDEO_HELD_PORTS": held}
    sides = {"with": dict(env, LD_PRELOAD=lib), "without": env}
    times = {k: [] for k in sides}
    for i in range(reps + 2):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            t = time.time()
            p = as_user_in(NODES[0], [*in_image(root), "python3", "-c", HELD_BIND_PY], sides[side])
            out, _ = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"bench: a held bind ({side} the preload) failed: {out}")
            if i >= 2:  # the first two of each side warm the page cache
                times[side].append(time.time() - t)
    os.unlink(lib)
    return median(times["with"]), median(times["without"])


# ---------------------------------------------------------------- 1. ready

def syndeo_ready(image):
    """A 3-node syndeo job's seconds to ready, each node's teardown, and the
    ready time's phases (PHASE_NAMES)."""
    jid = submit(["-N3", f"--syndeo={image}"], "#!/bin/bash\necho T_SCRIPT $(date +%s.%N)\n")
    st = wait_job(jid)
    out, err = job_out(jid)
    m = re.search(r"T_SCRIPT (\S+)", out)
    if st != "COMPLETED" or not m:
        raise SystemExit(f"syndeo job {jid} {st}: {out}{err}")
    starts = [log_time(l) for _, l in slurmd_lines(f"syndeo: prolog for job {jid}:")]
    ready = float(m.group(1)) - min(starts)
    teardown = [int(re.search(r"node clean in (\d+) ms", l).group(1)) / 1000
                for _, l in slurmd_lines(f"syndeo: epilog for job {jid}: node clean in")]
    return ready, teardown, syndeo_phases(jid, min(starts), float(m.group(1)))


# Where each side's ready time goes, one dict per repetition: the phases of
# PHASE_NAMES, in seconds.
PHASES = {"syndeo": [], "bare": []}
PHASE_NAMES = [
    ("start", "Slurm's prolog until every node's agent runs (bare: none)"),
    ("before", "the agent's start until the head's `ray start` begins: election, container, Ray's import "
               "(bare: none; its `ray start` imports Ray itself)"),
    ("head", "the head's `ray start`, until it returns"),
    ("workers", "the workers' `ray start`, from the head's return until the last worker's"),
    ("listed", "until Ray's status lists 3 nodes and the job is told (bare: the ready check's Python)"),
]


def agent_log(jid, node):
    """(time, message) of each line of `node`'s agent.log in job `jid`'s
    directory (the job's submission directory keeps it)."""
    path = os.path.join(os.path.dirname(JOBS[jid]["stdout"]), f"syndeo-{jid}", node, "agent.log")
    lines = []
    for line in open(path, errors="replace"):
        stamp, _, rest = line.partition(" ")
        try:
            lines.append((datetime.datetime.fromisoformat(stamp).timestamp(), rest))
        except ValueError:
            pass
    return lines


def syndeo_phases(jid, prolog, script):
    """Job `jid`'s ready time split by its agents' logs (PHASE_NAMES)."""
    def first(lines, text):
        return next((t for t, m in lines if text in m), None)
    logs = {n: agent_log(jid, n) for n in NODES}
    head = next(n for n in NODES if first(logs[n], "this node is the head") is not None)
    h = logs[head]
    began = max(first(h, "this node is the head"), first(h, "the image's Ray loaded"))
    started = first(h, "Ray head started in")
    joined = max(first(logs[n], "Ray worker joined") for n in NODES if n != head)
    return {"start": max(first(logs[n], "agent started") for n in NODES) - prolog,
            "before": began - first(h, "agent started"), "head": started - began,
            "workers": joined - started, "listed": script - joined}


def phase_lines():
    """The phases' table for BENCHMARKS.md: each side's median per phase."""
    lines = ["| phase of the ready time (medians) | syndeo | bare `ray start` |", "|---|---|---|"]
    for key, name in PHASE_NAMES:
        lines.append(f"| {name} | " + " | ".join(
            f"{median([p[key] for p in PHASES[side]]):.2f} s" for side in ("syndeo", "bare")) + " |")
    return lines


def as_step(jid, node, argv, env):
    """ARGV as a step of job `jid` on `node`, as USER, with only `env`:
    `srun --jobid --overlap` (the job's steps share its CPUs and memory),
    started through SLURM_ARGV, the step's task `env -i` so that
    the command gets no SLURM_* variable (nor syndeo's, nor the bench's).
    The step has every CPU of the node: a step of one task is otherwise
    pinned to one CPU. The returned process is srun; the task runs under the
    node's slurmstepd, in the step's cgroup, where syndeo's own processes of
    the job are too."""
    envv = [f"{k}={v}" for k, v in env.items()]
    cmd = [*SLURM_ARGV, "srun", f"--jobid={jid}", "--overlap", "-N1", "-n1",
           "-w", node, f"-c{node_cpus()}", "--quiet", "/usr/bin/env", "-i", *envv, *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/",
                            env={"PATH": "/usr/bin:/bin"})


def bare_cluster(root, jid=None):
    """Bare `ray start --block` on every node (head, then the workers in
    parallel), with the flags syndeo uses and token auth, as USER, each in
    in_image(root): each a process of the bench's (as_user_in), or with
    `jid` a step of that job (as_step). Returns (seconds to ready, its
    phases (PHASE_NAMES), the processes started (bwrap, or srun), env
    marker, the head's address, node1's env)."""
    mark = f"SYNDEO_BENCH_BARE={secrets.token_hex(4)}"
    token = secrets.token_hex(32)
    # Below syndeo's Ray ports (etc/syndeo.toml's ray_ports, 20000-32767),
    # which the syndeo cluster of the same job holds: a port drawn among
    # them met one of its Ray's (the bare GCS: "Address already in use").
    port = 10000 + secrets.randbelow(9000)

    def env(node):
        return {"PATH": "/usr/bin:/bin", "HOME": home(), "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
                mark.split("=")[0]: mark.split("=")[1]}

    def common(node):
        return ["--block", "--node-ip-address", IP[node], "--num-cpus", str(node_cpus()), "--num-gpus", str(node_gpus(node)),
                "--object-store-memory", str(512 << 20), "--temp-dir", f"/tmp/bench-{mark[-8:]}",
                "--min-worker-port", "0", "--max-worker-port", "0", "--disable-usage-stats"]

    def wait_started(p):
        said = []
        for line in p.stdout:
            if "Ray runtime started" in line:
                return
            said = (said + [line.rstrip()])[-15:]
        raise SystemExit("bare ray start failed; its last lines:\n" + "\n".join(said))

    def start(node, argv):
        return as_user_in(node, argv, env(node)) if jid is None else as_step(jid, node, argv, env(node))

    t0 = time.time()
    head = start(NODES[0], [*in_image(root), "ray", "start", "--head", "--port", str(port),
                            "--include-dashboard", "false", "--dashboard-port", str(port + 1), *common(NODES[0])])
    wait_started(head)
    t_head = time.time()
    workers = [start(n, [*in_image(root), "ray", "start", "--address", f"{IP[NODES[0]]}:{port}", *common(n)])
               for n in NODES[1:]]
    for w in workers:
        wait_started(w)
    t_workers = time.time()
    check = as_user_in(NODES[0], [*in_image(root), "python3", "-c", READY_PY, f"{IP[NODES[0]]}:{port}", "3"],
                       env(NODES[0]))
    out, _ = check.communicate(timeout=120)
    if "T_READY" not in out:
        raise SystemExit(f"bare cluster never listed 3 nodes: {out}")
    phases = {"start": 0.0, "before": 0.0, "head": t_head - t0, "workers": t_workers - t_head,
              "listed": time.time() - t_workers}
    return time.time() - t0, phases, [head, *workers], mark, f"{IP[NODES[0]]}:{port}", env(NODES[0])


def bare_stop(procs, mark, steps=False):
    """SIGTERM to each `ray start --block` inside its container, as to Ray run
    on the node itself (bwrap, its parent, would die of it and take it along
    by SIGKILL: --die-with-parent); the seconds until no process of the
    cluster is left. The container (bwrap, Apptainer's starter) ends when
    its command does, and with it a step's task and srun. As steps
    (bare_cluster's jid), `procs` are sruns: the commands are the marked
    children of containers found in /proc."""
    t0 = time.time()
    if steps:
        # The marked processes whose parent is a container (Apptainer's
        # starter does not keep the environment it was given; bwrap does).
        containers = {p for p, name in each_process("comm") if name.strip() in CONTAINERS}
        marked = set(processes_with_env(mark))
        commands = [p for p, stat in each_process("stat") if p in marked and parent(stat) in containers]
    else:
        commands = [contained_command(p) for p in procs]
    for pid in commands:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    while processes_with_env(mark) and time.time() - t0 < 30:
        time.sleep(0.05)
    took = time.time() - t0
    for pid in processes_with_env(mark):  # what SIGTERM left: ours, by PID
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()
    clean_bench_dirs()
    return took


def clean_bench_dirs():
    """The peers' Ray temp dirs in every node's own /tmp: /tmp/bench-*, and
    /tmp/ray (symmetric-run must use Ray's default: its head finds the
    cluster through it). syndeo itself uses neither."""
    for n in NODES:
        mc("in-node", n, "--", "find", "/tmp", "-maxdepth", "1",
           "(", "-name", "bench-*", "-o", "-name", "ray", ")", "-user", USER, "-exec", "rm", "-rf", "{}", "+",
           check=False)


def peer_job_ready(script):
    """A plain (no --syndeo) 3-node job printing T_SCRIPT at its start and
    T_READY when the peer's launcher hands over to the user's code. Only the
    time to ready counts: the job is cancelled once T_READY is out (on this
    machine the nodes share a PID namespace, so symmetric-run's closing
    host-wide `ray stop` strands its workers' `ray start --block`)."""
    jid = submit(["-N3"], script)
    t0 = time.time()
    out = ""
    state = ""
    while time.time() - t0 < 300 and "T_READY" not in out and state in ("PENDING", "RUNNING", "CONFIGURING", ""):
        time.sleep(0.2)
        out = job_out(jid)[0]
        state = job_state(jid)
    mc("cancel", jid, check=False)
    wait_job(jid, limit=120)
    out, err = job_out(jid)
    for pid in processes_with_env(f"SLURM_JOB_ID={jid}"):  # anything of the job Slurm left
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    clean_bench_dirs()
    a, b = re.search(r"T_SCRIPT (\S+)", out), re.search(r"T_READY (\S+)", out)
    if not (a and b):
        raise SystemExit(f"peer job {jid} gave no times (it was {state or 'unknown'} after "
                         f"{time.time() - t0:.0f} s): {out}{err[-2000:]}")
    return float(b.group(1)) - float(a.group(1))


def ready_check_file():
    """READY_PY where the peers' jobs can run it."""
    path = os.path.join(WORK, "ready_check.py")
    with open(path, "w") as f:
        f.write(READY_PY)
    os.chmod(path, 0o644)
    return path


def symmetric_run_script(root):
    """Ray's `symmetric-run` under srun, as Ray's docs give it; `ray` (and
    the entrypoint's python3, its child) in the image (in_image_script)."""
    port = 20000 + secrets.randbelow(9000)
    wrap = in_image_script(root)
    return f"""#!/bin/bash
echo T_SCRIPT $(date +%s.%N)
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 AUTOSCALER_UPDATE_INTERVAL_S=1
# Its workers build a GcsClient outside their retry loop, which gives up after
# Ray's 5 s connect timeout if the head's GCS is slower than that to come up.
export RAY_gcs_rpc_server_connect_timeout_s=30
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
head_ip=$(getent ahostsv4 "$head" | awk 'NR == 1 {{print $1}}')
srun --nodes=3 --ntasks-per-node=1 {wrap} ray symmetric-run --address "$head_ip:{port}" --min-nodes 3 \\
    --num-cpus {node_cpus()} --object-store-memory {512 << 20} -- \\
    python3 {ready_check_file()} "$head_ip:{port}" 3
"""


def template_script(root):
    """Ray's documented Slurm template (ray/doc/source/cluster/doc_code/slurm-basic.sh),
    minus GPUs; every `ray` and `python3` in the image (in_image_script)."""
    port = 20000 + secrets.randbelow(9000)
    wrap = in_image_script(root)
    return f"""#!/bin/bash
echo T_SCRIPT $(date +%s.%N)
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 AUTOSCALER_UPDATE_INTERVAL_S=1
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
nodes_array=($nodes)
head_node=${{nodes_array[0]}}
head_node_ip=$(getent hosts "$head_node" | awk '{{print $1}}')
ip_head=$head_node_ip:{port}
srun --nodes=1 --ntasks=1 -w "$head_node" {wrap} ray start --head --node-ip-address="$head_node_ip" --port={port} \\
    --num-cpus {node_cpus()} --include-dashboard false --temp-dir /tmp/bench-tp{port} --block &
sleep 10
worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
    node_i=${{nodes_array[$i]}}
    srun --nodes=1 --ntasks=1 -w "$node_i" {wrap} ray start --address "$ip_head" --num-cpus {node_cpus()} --temp-dir /tmp/bench-tp{port} --block &
    sleep 5
done
{wrap} python3 {ready_check_file()} "$ip_head" 3
"""


# ---------------------------------------------------------------- 3. srun cost

def srun_latency(n):
    """n times `srun -N1 -n1 true` as USER, each timed from its start to its
    exit; nothing but nsenter and runuser in between (SLURM_ARGV)."""
    xs = []
    for _ in range(n):
        t = time.time()
        r = sh([*SLURM_ARGV, "srun", "-N1", "-n1", "true"])
        if r.returncode != 0:
            raise SystemExit(f"srun true failed: {r.stderr}")
        xs.append(time.time() - t)
    return xs


def restart_slurm():
    mc("restart")
    refresh_argvs()


def use_plugins(side, empty_plugin):
    """Plugstack for one side of the srun benchmark: syndeo's snippet ("with"),
    the empty plugin's instead ("empty"), or neither ("without")."""
    plugstack_d = f"{ROOT}/etc/slurm/plugstack.conf.d"
    conf, off, empty = (os.path.join(plugstack_d, f) for f in ("syndeo.conf", "syndeo.conf.bench-off", "bench-empty.conf"))
    if (side == "with") != os.path.exists(conf):
        os.rename(*((off, conf) if side == "with" else (conf, off)))
    if side == "empty":
        with open(empty, "w") as f:
            f.write(f"optional {empty_plugin}\n")
    elif os.path.exists(empty):
        os.remove(empty)


def srun_cost(n, empty_plugin):
    """Medians of n sruns for each side: with syndeo, with an empty plugin
    that has job prolog/epilog hooks (the floor for any such plugin), and
    without either. Nine blocks, each side once in every third of the run,
    each after a restart of Slurm and two sruns not counted: a drift of the
    machine's speed and the restarts' after-effects fall on all alike."""
    order = ["with", "empty", "without", "without", "with", "empty", "empty", "without", "with"]
    times = {"with": [], "empty": [], "without": []}
    try:
        for side in order:
            use_plugins(side, empty_plugin)
            restart_slurm()
            srun_latency(2)
            times[side] += srun_latency(max(1, n // 3))
    finally:
        use_plugins("with", empty_plugin)
        restart_slurm()
    return {side: median(xs) for side, xs in times.items()}


# ---------------------------------------------------------------- 4. throughput

def wait_file(path, limit, why_not, every=1.0):
    """Waits for `path`, looking every 5 ms; `why_not()` (asked once every
    `every` s: it may run scontrol) names a reason to give up early, or None."""
    end, asked = time.time() + limit, time.time()
    while not os.path.exists(path):
        if time.time() - asked >= every:
            asked = time.time()
            reason = why_not()
            if reason:
                raise SystemExit(f"throughput: no {os.path.basename(path)}: {reason}")
        if time.time() > end:
            raise SystemExit(f"throughput: no {os.path.basename(path)} within {limit} s")
        time.sleep(0.005)


def machine_counters():
    """(CPU seconds the whole machine has spent not idle, all cores; processes
    it has started since boot, every fork and clone), from one read of
    /proc/stat."""
    stat = open("/proc/stat").read()
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat.split("\n", 1)[0].split()[1:9])
    started = int(re.search(r"^processes (\d+)", stat, re.M).group(1))
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK"), started


def job_processes(jid, other=None):
    """A syndeo job's processes: those in its cgroup (with Slurm's cgroup
    plugins; the step's container, whose environment Apptainer cleans, and
    FUSE daemons among them) and those with syndeo's marker for it (the
    agent, the container runtime, Ray) or Slurm's (the step's driver, when
    no cgroup holds it). Not the steps of the job that hold a process with
    the `other` marker (the bare cluster's, as_step), nor any process with
    that marker, nor any slurmstepd (is_stepd)."""
    marks = {f"SYNDEO_JOB_ID={jid}".encode(), f"SLURM_JOB_ID={jid}".encode()}
    envs = {p: set(env.split(b"\0")) for p, env in each_process("environ")}
    theirs = {p for p, env in envs.items() if other.encode() in env} if other else set()
    step = re.compile(rf"/job_{jid}/(step_[^/\n]+)/".encode())
    cgroups = dict(each_process("cgroup"))
    their_steps = {m.group(1) for p in theirs for m in [step.search(cgroups.get(p, b""))] if m}
    pids = {p for p, env in envs.items() if marks & env}
    pids.update(p for p, cg in cgroups.items() if f"/job_{jid}/".encode() in cg)
    return {p for p in pids - theirs
            if not ((m := step.search(cgroups.get(p, b""))) and m.group(1) in their_steps) and not is_stepd(p)}


def is_stepd(pid):
    """Whether `pid` is a slurmstepd: each side's steps have theirs (the bare
    side's are in neither side's processes), so neither side counts them."""
    try:
        return open(f"/proc/{pid}/comm", "rb").read().strip() == b"slurmstepd"
    except OSError:
        return False


def python_program(pid, comm):
    """`python3 PROGRAM` for a Python process: which of a side's Pythons
    (its driver, Ray's log monitor or autoscaler, syndeo's launcher) it is."""
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return comm
    prog = next((a for a in argv[1:] if a and not a.startswith(b"-")), b"")
    return f"{comm} {os.path.basename(prog.decode(errors='replace'))}".strip()


def cpu_of_processes(pids):
    """{PID: (command name, CPU seconds so far: user and system)} of each of
    `pids`. Not its reaped children's (cutime): a child alive at one snapshot
    and reaped before the next would count its whole life there."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for pid in pids:
        try:
            stat = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm.startswith("python"):
            comm = python_program(pid, comm)
        cpu[pid] = (comm, sum(int(x) for x in rest[11:13]) / tick)
    return cpu


def cpu_by_command(before, after):
    """CPU seconds each command name spent between two cpu_of_processes():
    the processes alive at the second (those started since from zero)."""
    by = collections.Counter()
    for pid, (comm, secs) in after.items():
        by[comm] += secs - before.get(pid, (comm, 0.0))[1]
    return by


def cpu_table(by_cmd, cpu, tasks, forked):
    """Where each side's CPU went during its own rounds, per 1,000 tasks: its
    processes by command name (the largest first), and the rest of the
    machine (Slurm, the kernel, the other side's idle cluster, and processes
    that began and ended inside a round, which no scan saw: how many the
    machine started is the last row)."""
    per = 1000 / tasks
    names = sorted(set(by_cmd["syndeo"]) | set(by_cmd["bare"]),
                   key=lambda n: -max(by_cmd["syndeo"][n], by_cmd["bare"][n]))
    rows = ["| process (command name) | syndeo, s per 1,000 tasks | bare | syndeo - bare |", "|---|---|---|---|"]
    for n in names:
        s, b = by_cmd["syndeo"][n] * per, by_cmd["bare"][n] * per
        if max(s, b) >= 0.005:
            rows.append(f"| {n} | {s:.3f} | {b:.3f} | {s - b:+.3f} |")
    rest = {side: (cpu[side] - sum(by_cmd[side].values())) * per for side in cpu}
    rows.append(f"| the rest of the machine | {rest['syndeo']:.3f} | {rest['bare']:.3f} | "
                f"{rest['syndeo'] - rest['bare']:+.3f} |")
    s, b = (forked[side] * per for side in ("syndeo", "bare"))
    rows.append(f"| processes the machine started (forks and clones, not CPU) | {s:.1f} | {b:.1f} | {s - b:+.1f} |")
    return rows


def throughput_pair(image, root, rounds):
    """A syndeo cluster and a bare one, up at once on the same nodes, in the
    same Slurm job: the bare cluster's `ray start`s and its driver are plain
    steps of the syndeo job (as_step), so both sides' processes live in the
    job's cgroups, under its limits and accounting, as a user would run Ray
    by hand in their allocation. Their drivers take turns, one round of
    2,000 tasks at a time, and which side goes first alternates: a drift of
    the machine's speed falls on both alike. The bare side's cluster and
    driver run in in_image(root). Returns, per side, the rates (tasks/s, one
    per round), the machine's busy CPU seconds during that side's rounds
    and, of those, each of its processes' by command name (cpu_by_command: a
    process that ends within a round and is not reaped by one of its side
    counts in neither)."""
    # The syndeo job runs in d: its container sees its directory, not WORK.
    d = user_dir(f"tput-{secrets.token_hex(3)}")
    script = write_user_file("tput.py", TPUT_PY, d)
    finish = os.path.join(d, "finish")
    # The driver's step gets every CPU of node1, as the bare driver may use
    # every core: a step of one task is otherwise pinned to one CPU. --mem=0:
    # the job has the nodes' whole memory, which its overlapping steps share.
    # The job stays until the bench has stopped the bare cluster's steps.
    jid = submit(["-N3", "--mem=0", f"--syndeo={image}"],
                 f"#!/bin/bash\nsrun --syndeo -N1 -n1 -c{node_cpus()} python3 tput.py syndeo {d} {rounds}\n"
                 f"while [ ! -e {shlex.quote(finish)} ]; do sleep 0.2; done\n", d)
    procs, mark, bare = [], None, None
    try:
        def why_not():
            if bare is not None and bare.poll() not in (None, 0):
                return f"the bare driver failed: {bare.stdout.read()[-2000:]}"
            st = job_state(jid)
            if st not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", ""):
                return f"syndeo job {jid} {st}: {''.join(job_out(jid))[-2000:]}"
            return None

        wait_file(os.path.join(d, "syndeo.ready"), 300, why_not)
        try:
            _, _, procs, mark, addr, env = bare_cluster(root, jid)
            bare = as_step(jid, NODES[0], [*in_image(root), "python3", script, "bare", d, str(rounds)],
                           dict(env, RAY_ADDRESS=addr))
            wait_file(os.path.join(d, "bare.ready"), 300, why_not)
            rates, cpu = {"syndeo": [], "bare": []}, {"syndeo": 0.0, "bare": 0.0}
            forked = {"syndeo": 0, "bare": 0}
            by_cmd = {"syndeo": collections.Counter(), "bare": collections.Counter()}
            which = {"syndeo": lambda: job_processes(jid, mark), "bare": lambda: processes_with_env(mark)}
            for k in range(rounds):
                for side in (("syndeo", "bare") if k % 2 == 0 else ("bare", "syndeo")):
                    # The /proc scan first: its own CPU is not the round's.
                    procs_before = cpu_of_processes(which[side]())
                    busy, forks = machine_counters()
                    open(os.path.join(d, f"go-{side}-{k}"), "w").close()
                    done = os.path.join(d, f"done-{side}-{k}")
                    # why_not runs scontrol through the minicluster (about ten
                    # processes): asked once a second, it fell inside a round
                    # only when the round took over a second, so a side whose
                    # rounds were a little slower paid for it far more often
                    # (rounds of 0.85 s against 1 s on a fast machine).
                    wait_file(done, 120, why_not, every=30)
                    busy_after, forks_after = machine_counters()
                    cpu[side] += busy_after - busy
                    forked[side] += forks_after - forks
                    by_cmd[side].update(cpu_by_command(procs_before, cpu_of_processes(which[side]())))
                    rates[side].append(float(open(done).read()))
            open(os.path.join(d, "rounds-over"), "w").close()
            bare.communicate(timeout=60)
        finally:
            if mark is not None:
                bare_stop(procs, mark, steps=True)
            if bare is not None and bare.poll() is None:
                bare.kill()
                bare.wait()
            open(finish, "w").close()
        if wait_job(jid) != "COMPLETED":
            raise SystemExit(f"syndeo job {jid}: {''.join(job_out(jid))[-2000:]}")
        jid = None
        return rates, cpu, by_cmd, forked
    finally:
        if jid is not None:
            mc("cancel", jid, check=False)
            wait_job(jid, limit=120)
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------- report

MESH_SIZES = [64, 256, 1024, 4096]


def mesh_scale(binary, reps):
    """The mesh-scale benchmark (mesh-sim's examples/mesh_bench.rs), as the
    unprivileged user: per N, over `reps` runs, the medians of the seconds to
    ready, the messages per node, the head's CPU per joining node (µs) and
    the projected seconds at 4,096 and 16,384 real nodes."""
    runs = {n: [] for n in MESH_SIZES}
    for i in range(reps):
        if i:
            # The last run's connections hold its loopback addresses and mesh
            # ports in TIME_WAIT for up to a minute: its listeners could not bind.
            time.sleep(60)
        out = sh(["runuser", "-u", USER, "--", binary, ",".join(map(str, MESH_SIZES))],
                 check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 7 and f[0].isdigit():
                runs[int(f[0])].append((float(f[1]), int(f[2]), float(f[4]), float(f[5]), float(f[6])))
    return {n: (median([r[0] for r in v]), median([r[1] for r in v]) / n,
                median([r[2] for r in v]), median([r[3] for r in v]), median([r[4] for r in v]))
            for n, v in runs.items()}


def plot(rows, path):
    data = os.path.join(OUT, "ready.dat")
    with open(data, "w") as f:
        for name, xs in rows:
            f.write(f'"{name}" {median(xs):.3f} {min(xs):.3f} {max(xs):.3f}\n')
    gp = f"""set terminal pngcairo size 800,450 noenhanced
set output '{path}'
set title 'Cluster-ready time, 3 nodes (median, min-max), one run'
set ylabel 'seconds from job start'
set style fill solid 0.6
set boxwidth 0.6
set yrange [0:*]
set grid ytics
plot '{data}' using 0:2:xtic(1) with boxes notitle, '' using 0:2:3:4 with yerrorbars notitle lc rgb 'black'
"""
    r = subprocess.run(["gnuplot"], input=gp, capture_output=True, text=True)
    if r.returncode != 0:
        log("gnuplot:", r.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--dashboard-image", help="the image with ray[default]: syndeo's ready time with the dashboard on")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--srun-reps", type=int, default=40)
    # Pairs of clusters (one syndeo, one bare) for throughput, and rounds a
    # side in each: the rate moves by 10% from round to round on these
    # shared cores, and by more from one cluster to the next.
    ap.add_argument("--tput-reps", type=int, default=5)
    ap.add_argument("--tput-rounds", type=int, default=12)
    ap.add_argument("--only-throughput", action="store_true",
                    help="only the throughput pairs, with where each side's CPU went; prints, writes nothing")
    ap.add_argument("--peers-from-sif", action="store_true",
                    help="with --only-throughput and a SIF image: the bare side runs from the SIF too, mounted "
                         "with squashfuse_ll on every node (peers_sif_root), not from its directory")
    ap.add_argument("--peers-from-copies", action="store_true",
                    help="with --only-throughput: the bare side runs on each node from its own copy of the "
                         "image's directory (peers_copies_root), not all nodes from the same one")
    ap.add_argument("--no-mesh", action="store_true",
                    help="leave out the mesh-scale step (it does not depend on Slurm's release or the runtime; "
                         "BENCHMARKS.md's \"Mesh scale alone\" has it)")
    ap.add_argument("--mesh-bench", required=True, help="the mesh-scale benchmark's binary (examples/mesh_bench.rs)")
    ap.add_argument("--empty-plugin", required=True, help="bench/empty_spank.c, built")
    ap.add_argument("--mc", required=True, help="the minicluster's client, syndeo-mc (tests/src/bin/syndeo-mc.rs)")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    connect(a.mc)
    started = time.time()
    root = image_root(a.image)
    # The peers' image: the SIF itself with Apptainer; preload_cost keeps the
    # directory (it times syndeo's preload library, not a peer).
    peers_root = peers_image(a.image, FACTS["runtime"])
    if a.peers_from_sif or a.peers_from_copies:
        # However the bench ends, from before the first mount on.
        atexit.register(unmount_peers_roots)
    if a.peers_from_sif:
        if not (a.only_throughput and a.image.endswith(".sif")):
            raise SystemExit("bench: --peers-from-sif needs --only-throughput and a SIF --image")
        peers_root = peers_sif_root(a.image)
    if a.peers_from_copies:
        if not a.only_throughput:
            raise SystemExit("bench: --peers-from-copies needs --only-throughput")
        peers_root = peers_copies_root(root)
    peers = peer_versions(peers_root)
    log(f"bench: the peers run {peers} {peers_how(peers_root)} ({peers_root}), without syndeo")

    ready = {"syndeo": [], "bare ray start": [], "symmetric-run": [], "sleep template": []}
    if a.dashboard_image:
        ready["syndeo, dashboard on"] = []
    teardown_syndeo, teardown_bare = [], []

    def run_syndeo():
        r, td, phases = syndeo_ready(a.image)
        teardown_syndeo.extend(td)
        PHASES["syndeo"].append(phases)
        return r

    def run_bare():
        r, phases, procs, mark, _, _ = bare_cluster(peers_root)
        PHASES["bare"].append(phases)
        teardown_bare.append(bare_stop(procs, mark))
        return r

    runs = {"syndeo": run_syndeo, "bare ray start": run_bare,
            "symmetric-run": lambda: peer_job_ready(symmetric_run_script(peers_root)),
            "sleep template": lambda: peer_job_ready(template_script(peers_root)),
            "syndeo, dashboard on": lambda: syndeo_ready(a.dashboard_image)[0]}
    order = [side for side in ["bare ray start", "syndeo", "syndeo, dashboard on", "symmetric-run", "sleep template"]
             if side in ready]
    for i in range(0 if a.only_throughput else a.reps):
        # Interleaved: each repetition runs the sides in the other order, so a
        # drift of the machine's speed falls on both sides of each ratio alike.
        log(f"bench: repetition {i + 1}/{a.reps}")
        for side in (order if i % 2 == 0 else order[::-1]):
            ready[side].append(runs[side]())
    if not a.only_throughput:
        log("bench: srun cost with the plugin, with an empty plugin, and without")
        srun = srun_cost(a.srun_reps, a.empty_plugin)
        with_plugin, without_plugin = srun["with"], srun["without"]
        log("bench: the preload library's cost to a process of Ray's container")
        held_with, held_without = preload_cost(root, a.srun_reps)
    log("bench: task throughput")
    tputs = {"syndeo": [], "bare": []}
    cpu = {"syndeo": 0.0, "bare": 0.0}
    pair_ratios = []
    by_cmd = {"syndeo": collections.Counter(), "bare": collections.Counter()}
    forked = {"syndeo": 0, "bare": 0}
    for i in range(a.tput_reps):
        rates, used, procs, forks = throughput_pair(a.image, peers_root, a.tput_rounds)
        for side in tputs:
            tputs[side] += rates[side]
            cpu[side] += used[side]
            by_cmd[side].update(procs[side])
            forked[side] += forks[side]
        pair_ratios.append(median(rates["syndeo"]) / median(rates["bare"]))
    tput_syndeo, tput_bare = median(tputs["syndeo"]), median(tputs["bare"])
    tasks = 2000 * a.tput_rounds * a.tput_reps
    cpu_syndeo, cpu_bare = (cpu[side] / tasks * 1000 for side in ("syndeo", "bare"))
    where = cpu_table(by_cmd, cpu, tasks, forked)
    if a.only_throughput:
        print(f"throughput: syndeo {tput_syndeo:.0f}/s, bare {tput_bare:.0f}/s, syndeo/bare "
              f"{tput_syndeo / tput_bare:.3f}; pairs: {', '.join(f'{x:.3f}' for x in pair_ratios)}")
        print(f"CPU per 1,000 tasks, whole machine: syndeo {cpu_syndeo:.3f} s, bare {cpu_bare:.3f} s, "
              f"syndeo/bare {cpu_syndeo / cpu_bare:.3f}")
        print("\n".join(where))
        return
    mesh = None
    if not a.no_mesh:
        log("bench: mesh scale (simulated agents on loopback)")
        mesh = mesh_scale(a.mesh_bench, a.reps)
    cfg = cluster_config()
    start = None
    if cfg["runtime"] == "apptainer" and a.image.endswith(".sif"):
        log("bench: Apptainer's own start cost")
        start = apptainer_start(a.image, a.srun_reps // 2)

    med = {k: median(v) for k, v in ready.items()}
    # The ratios: the median of each repetition's own ratio.
    ratio = {
        "syndeo/bare": median([s / b for s, b in zip(ready["syndeo"], ready["bare ray start"])]),
        "symmetric-run/syndeo": median([p / s for p, s in zip(ready["symmetric-run"], ready["syndeo"])]),
        "template/syndeo": median([p / s for p, s in zip(ready["sleep template"], ready["syndeo"])]),
    }
    lines = [
        f"syndeo benchmarks, {time.strftime('%Y-%m-%d %H:%M')}, 3-node minicluster, Slurm {cfg['release']} "
        f"({cfg['cgroups']}), Ray 2.60, {cfg['runtime']}, {a.reps} repetitions (medians)",
        "",
        "| measurement | syndeo | peer | ratio |",
        "|---|---|---|---|",
        f"| ready time vs bare `ray start` (floor) | {med['syndeo']:.2f} s | {med['bare ray start']:.2f} s | "
        f"syndeo/bare {ratio['syndeo/bare']:.2f} |",
        f"| ready time vs `ray symmetric-run` | {med['syndeo']:.2f} s | {med['symmetric-run']:.2f} s | "
        f"symmetric-run/syndeo {ratio['symmetric-run/syndeo']:.2f} |",
        f"| ready time vs Ray's sleep template | {med['syndeo']:.2f} s | {med['sleep template']:.2f} s | "
        f"template/syndeo {ratio['template/syndeo']:.2f} |",
    ] + ([
        f"| ready time, image with `ray[default]` (dashboard, jobs API and metrics on) vs the plain `ray` image | "
        f"{med['syndeo, dashboard on']:.2f} s | {med['syndeo']:.2f} s | dashboard/plain "
        f"{median([d / s for d, s in zip(ready['syndeo, dashboard on'], ready['syndeo'])]):.2f} |",
    ] if a.dashboard_image else []) + [
        f"| teardown per node (syndeo: epilog to clean node; bare: SIGTERM to no process) | "
        f"{median(teardown_syndeo):.2f} s | {median(teardown_bare):.2f} s | "
        f"syndeo/bare {median(teardown_syndeo) / median(teardown_bare):.2f} |",
        f"| `srun -N1 true` with the plugin vs without | {with_plugin * 1000:.0f} ms | {without_plugin * 1000:.0f} ms | "
        f"with/without {with_plugin / without_plugin:.3f} |",
        f"| `srun -N1 true`, syndeo vs an empty plugin with job prolog/epilog hooks | {with_plugin * 1000:.0f} ms | "
        f"{srun['empty'] * 1000:.0f} ms | syndeo/empty {with_plugin / srun['empty']:.3f} (empty/without "
        f"{srun['empty'] / without_plugin:.3f}) |",
        f"| a process in the image starts, binds a held port and exits: with syndeo's preload library (port "
        f"holding) vs without | {held_with * 1000:.0f} ms | {held_without * 1000:.0f} ms | "
        f"with/without {held_with / held_without:.3f} |",
        f"| Ray task throughput, rounds of 2,000 tasks taken in turn (syndeo container vs bare) | "
        f"{tput_syndeo:.0f}/s | {tput_bare:.0f}/s | syndeo/bare {tput_syndeo / tput_bare:.2f} |",
        f"| CPU per 1,000 of those tasks, whole machine | {cpu_syndeo:.2f} s | {cpu_bare:.2f} s | "
        f"syndeo/bare {cpu_syndeo / cpu_bare:.2f} |",
    ] + ([
        f"| Apptainer's own start, `apptainer exec --contain IMAGE true`: SIF vs its sandbox directory | "
        f"{start['sif'] * 1000:.0f} ms | {start['sandbox'] * 1000:.0f} ms | sif/sandbox "
        f"{start['sif'] / start['sandbox']:.2f} (SIF over a bare `true`, {start['bare'] * 1000:.0f} ms: "
        f"+{(start['sif'] - start['bare']) * 1000:.0f} ms) |",
    ] if start else []) + [
        "",
        "Ready ratios are the median of each repetition's own ratio; the sides ran in alternating order.",
        f"Every peer ran the image's {peers}, {peers_how(peers_root)}, without syndeo.",
        "Every repetition (seconds): " + "; ".join(f"{k}: {', '.join(f'{x:.2f}' for x in v)}" for k, v in ready.items()),
        "",
        "Where each side's ready time goes, from syndeo's agent logs and the bare side's own clock:",
        "",
        *phase_lines(),
        "",
        f"Throughput, syndeo/bare per pair of clusters ({a.tput_reps} pairs of {a.tput_rounds} rounds a side; "
        "each the ratio of the two sides' median rounds): " + ", ".join(f"{x:.2f}" for x in pair_ratios),
        "",
        "Where each side's CPU went during its own rounds, per 1,000 tasks: its processes by command name",
        "(syndeo's: the job's cgroup and syndeo's marker, less the bare cluster's steps; bare's: its marker;",
        "no slurmstepd), the rest of the machine apart.",
        "",
        *where,
    ] + (mesh_lines(mesh) if mesh else [
        "",
        "Mesh scale: not in this run (`--no-mesh`); it does not depend on Slurm's release or the runtime: see",
        "\"Mesh scale alone\" above.",
    ])
    print("\n".join(lines))
    print(f"ready ratio syndeo/bare: {ratio['syndeo/bare']:.2f}")
    print(f"ready ratio symmetric-run/syndeo: {ratio['symmetric-run/syndeo']:.2f}")
    print(f"throughput ratio syndeo/bare: {tput_syndeo / tput_bare:.2f}")
    if mesh:
        print(f"mesh scale 4096 nodes: {mesh[4096][0]:.2f} s, {mesh[4096][1]:.2f} messages per node, "
              f"head {mesh[4096][2]:.0f} µs per joining node (1024 nodes: {mesh[1024][0]:.2f} s, {mesh[1024][1]:.2f})")
    png = os.path.join(OUT, f"ready-{config_key(cfg)}.png")
    plot(list(ready.items()), png)
    write_benchmarks_md(lines, a, cfg, time.time() - started)
    log(f"bench: plot {png}; BENCHMARKS.md updated; took {time.time() - started:.0f} s")


def mesh_lines(mesh):
    """The mesh-scale table and its ratios, for BENCHMARKS.md."""
    return [
        "",
        "Mesh scale: N simulated nodes' agents in one process, each on its own loopback address, electing",
        "a head and wiring up (Join, Watch, Report) for real; **Ray's launch is replaced by a no-op** here.",
        "Time from the agents' start until every one of them sees the cluster ready; messages are mesh",
        "calls served plus cluster views streamed.",
        "",
        "| nodes | ready (median) | messages per node | head CPU per joining node |",
        "|---|---|---|---|",
    ] + [f"| {n} | {s:.3f} s | {m:.2f} | {h:.0f} µs |" for n, (s, m, h, _, _) in mesh.items()] + [
        "",
        f"4,096 nodes: {mesh[4096][0]:.2f} s (target < 3 s). Messages per node, 4,096 vs 1,024 nodes: "
        f"{mesh[4096][1] / mesh[1024][1]:.2f} (1.00 is O(N) messages in all); time, 4,096 vs 1,024: "
        f"{mesh[4096][0] / mesh[1024][0]:.2f} (4.00 is linear).",
        f"Projected from the head's CPU per joining node at 4,096 (each agent on its own machine; head CPU "
        f"× N + 5 ms, the head's mesh work on one core): {mesh[4096][3]:.2f} s at 4,096 real nodes, "
        f"{mesh[4096][4]:.2f} s at 16,384.",
    ]


def config_key(cfg):
    return f"slurm-{cfg['release']}-{cfg['runtime']}-{cfg['cgroups'].replace(' ', '-')}"


def write_benchmarks_md(lines, a, cfg, took):
    """BENCHMARKS.md keeps one section per configuration (release, runtime,
    cgroups); this run replaces its own and leaves the others."""
    path = os.path.join(REPO, "BENCHMARKS.md")
    try:
        old = open(path).read()
    except OSError:
        old = ""
    sections = dict(re.findall(r"<!-- bench: (\S+) -->\n(.*?)<!-- end -->\n", old, re.S))
    key = config_key(cfg)
    sections[key] = (
        f"## Slurm {cfg['release']}, {cfg['runtime']}, {cfg['cgroups']}\n\n"
        f"Made by `bench/run --reps {a.reps} --srun-reps {a.srun_reps}{' --no-mesh' if a.no_mesh else ''}` ({a.tput_reps} pairs of clusters for "
        f"throughput; took {took:.0f} s) on {time.strftime('%Y-%m-%d')}.\n\n"
        + "\n".join(lines) + f"\n\n![ready time](bench/out/ready-{key}.png)\n\n"
    )
    with open(path, "w") as f:
        f.write("""# Benchmarks

Made by `bench/run`, which rewrites its configuration's section of this file. Every figure
comes from one run on the 3-node minicluster: a real Slurm with 3 slurmd in network, UTS
and mount namespaces on one 2-core machine, and Ray 2.60; each section names the Slurm
release, syndeo's container runtime and whether Slurm's cgroup plugins were on. Absolute
times on this shared machine are noise. The ratios, measured side by side in the same run,
are the result. Benchmarks never fail CI.

""")
        for k in sorted(sections):
            f.write(f"<!-- bench: {k} -->\n{sections[k]}<!-- end -->\n")
        f.write("""
## How each figure is obtained

- **Resources, for every side**: all of each node's CPUs. Slurm's jobs (syndeo's and the
  peers') run `--exclusive`: with Slurm's cgroup plugins a job of one CPU a node is
  confined to one core, while bare Ray would use them all. Every Ray gets `--num-cpus`
  equal to the node's CPUs.
- **Ready, for every side**: Ray's own status (what `ray status` prints) lists all
  3 nodes active; by then a SPREAD wave reaches every node. Every side runs Ray's
  monitor with `AUTOSCALER_UPDATE_INTERVAL_S=1`, as syndeo does. The sides run in
  alternating order (bare, syndeo, symmetric-run, template, then the reverse), and each
  ratio is the median of the repetitions' own ratios.
- **syndeo ready**: `sbatch -N3 --syndeo=IMAGE`. The batch script starts only when the
  cluster is ready in that sense, and prints the time. The job's start is the earliest
  `syndeo: prolog for job N` line in the slurmd logs (ms resolution).
- **syndeo, dashboard on**: the same job with the test image built with `ray[default]`
  (`tests/image/build --default`): the dashboard, jobs API and metrics agent, which syndeo
  turns on by default when the image has them (what users bring). It runs among the other
  sides, in turn; the ratio is dashboard/plain image per repetition.
- **The peers' Python and Ray**: every peer (bare `ray start`, symmetric-run, the sleep
  template, the bare side of throughput) and the ready check run the image's own Python
  (3.11) and Ray, the files syndeo's container runs, from the image's root filesystem as
  the user, without syndeo:
  `bwrap --ro-bind IMAGE / --dev /dev --proc /proc --ro-bind /sys /sys --bind /tmp /tmp
  --bind /dev/shm /dev/shm --bind /home /home --ro-bind-try F F --setenv PATH
  /usr/local/bin:/usr/bin:/bin --die-with-parent -- ray …` (or `-- python3 …`), F being
  each of /etc/passwd, /etc/group, /etc/hosts and /etc/resolv.conf (`in_image` in
  bench.py; the batch scripts call a wrapper script that runs the same). Everything but
  the image's files is the node's own: network, PID namespace, /tmp, /dev/shm, /sys,
  /home. With Apptainer and a SIF, the peers run that same SIF as a user would without
  syndeo, `apptainer --quiet exec SIF ray …` (`peers_image`, `in_image`): Apptainer's
  defaults bind the node's /tmp, /dev, /sys, /proc and home, pass the environment on and
  keep the node's network and PID namespace, and every container mounts the SIF with its
  own squashfuse_ll, as syndeo's do; so the peers pay Apptainer's start and the reads
  through squashfuse too (until 2026-11-27 they ran the directory the SIF was built from,
  with bubblewrap, and syndeo/bare was 1.14 there). So each ratio compares syndeo with
  the same interpreter, Ray and image, whatever Python the nodes have.
- **The three sections above, 2026-11-27 22:00-22:40** (each `bench/run --reps 5
  --no-mesh`), after a node counts as started only once its agents are up (the
  launcher's `agents_up`: with Ray 2.54 and later the raylet is told its dashboard agent's
  port and registers at once; the launcher then waits for the node's dashboard and
  runtime env agents to write their ports, as Ray's own raylet waits before it
  registers, but with no abort). The peers' nodes join only with their agents up, so
  this is the like-for-like figure; the 18:00 runs below counted syndeo's nodes joined
  while their agents still started, and their first tasks then competed with those
  agents. Ready syndeo/bare **0.59** (22.05; 3.22 s), **0.61** (24.11; 3.49 s),
  **0.62** (26.05, SIF; 4.94 s); symmetric-run/syndeo **3.01**, **3.04**, 2.13;
  template/syndeo 9.46, 5.83, 4.27; with `ray[default]` 1.87, 1.76, 1.21 of the plain
  image (its dashboard agent loads every module before it writes its port). The head's
  `ray start` with its agents: 2.33 s (22.05), 2.64 s (24.11), 2.86 s (SIF): all three
  nodes' agents now start at once on the 2 cores. Teardown of a job that ends at ready
  is back to 0.3 s a node on 22.05 (its agents are up). Throughput 0.97, 0.98, 0.96;
  CPU per 1,000 tasks 0.98, 0.99, 1.06.
- **The sections above as they were at 2026-11-27 18:00-18:40** (each `bench/run --reps 5
  --no-mesh`), after the raylet stopped waiting for its dashboard agent (Ray 2.54 and
  later: syndeo gives the raylet the agent's listen port, `ray_version::raylet_args`;
  before, each raylet waited for the agent's Python to start and write that port to a
  file, on the path of every `ray start`): ready syndeo/bare **0.45** (22.05), **0.49**
  (24.11), **0.53** (26.05, SIF), before 0.70, 0.73, 0.67; symmetric-run/syndeo **3.80**,
  **3.85**, **2.63** (before 2.60, 2.62, 2.25); template/syndeo 13.17, 9.05, 5.15; the
  head's `ray start` 0.87 -> 0.35 s (22.05), 1.62 -> 0.78 s (SIF); with `ray[default]`
  the SIF's start is 1.01 of the plain image's (was 1.24). Throughput 0.99, 0.99, 0.97;
  CPU per 1,000 tasks 0.98, 0.98, 1.08: the SIF's throughput and CPU are still the gap
  (see "Where the throughput gap goes"). Those ready times counted a node as joined
  while its agents were still starting, which the peers' nodes (whose raylets wait for
  their agents) are not: see the next bullet up. A job that ended at ready then found its
  agents still starting: on bubblewrap they outlasted the launcher's 1 s SIGTERM grace,
  and the node's teardown was 1.3 s (0.3 once the agents are up).
- **The three sections above, 2026-11-27 11:30-12:00** (each `bench/run --reps 5
  --no-mesh`, after the idle-dashboard, socket and SIF-peer changes below): ready
  syndeo/bare **0.70** (22.05), **0.73** (24.11), **0.67** (26.05, SIF);
  symmetric-run/syndeo **2.60**, **2.62**, 2.25; template/syndeo 8.96, 5.52, 4.02;
  throughput 1.00, 0.99, 0.96; CPU per 1,000 tasks 0.99, 0.98, 1.07. The SIF's
  throughput and CPU are the gap that stands (see "Where the throughput gap goes").
- **Regenerated on 2026-11-27, after two fixes to syndeo's start** (the three sections
  above, this round's machine, an Intel Xeon with 2 cores, each `bench/run --reps 5
  --no-mesh`; the machine ran 10-20 % slower than in the earlier runs (05:30-06:00), both sides
  alike): ready syndeo/bare 0.83 (22.05), **0.69** (24.11), 1.14 (26.05, SIF), in the
  earlier runs before the fixes 1.05, 0.87, 1.22; symmetric-run/syndeo 2.42, 2.06, 1.48
  (before 1.82, 2.34, 1.67); template/syndeo 7.14, 4.83, 2.85; throughput 1.00, 0.98,
  0.93; CPU per 1,000 tasks 0.98, 0.98, 1.04.
- **The Apptainer section, with the peers on the SIF** (2026-11-27, `bench/run --reps 5
  --no-mesh`, after the peers moved from the SIF's directory under bubblewrap to the SIF
  itself under `apptainer exec`): at 10:47 ready syndeo/bare 0.72 (1.14 with the peers on
  the directory), symmetric-run/syndeo 1.84 (1.48), template/syndeo 3.99 (2.85),
  throughput 0.95 (0.93), CPU per 1,000 tasks 1.11 (1.04); the bare `ray start` from the
  SIF took 6.9-8.1 s against 5.3-6.4 s from the directory, syndeo's own 5.1-5.5 s. At
  11:01, after the socket fix below: 0.75, 1.85, 3.91, 0.95, 1.09, the same within the
  repetitions' spread; the section above is the run at 12:00, after the idle-dashboard
  fix too.
- **No idle dashboard on the head** (2026-11-27, the 22.05 section above, `bench/run
  --reps 5 --no-mesh` at 11:32): with `--include-dashboard false` (an image without
  `ray[default]`, or a site that turns the dashboard off) Ray's head still starts its
  dashboard process, loading only the usage-stats module (which syndeo turns off), and
  `ray start` polls, in 0.1 s steps, until that process is up before it starts the
  head's raylet (`services.start_api_server`). The launcher no longer starts it (Ray's
  own call answers "none started", as Ray answers a dashboard that failed to start).
  The head's `ray start` went from 1.35 to 0.87 s (phase table), one idle Python less
  runs for the job's life, and on 22.05 ready syndeo/bare went from 0.83 to **0.70**,
  symmetric-run/syndeo from 2.42 to **2.60**, throughput 1.00 (CPU 0.99). On these 2
  cores Ray's monitor, whose import now competes with the raylet's, starts about 0.2 s
  later, and the ready waits for its next report (every 1 s): the last phase grew from
  0.64 to 0.78 s. A/B on 22.05 (6 jobs each, agent start to ready): head's `ray start`
  returned at 1.52-1.75 s without the change, 1.31-1.40 s with it; the last worker joined
  at 2.55-2.83 s against 2.38-2.55 s.
- **Ray's local socket connects** (commit 3fabd2f): each raylet's object manager connects
  to the object store that its own thread is opening, and when the socket does not listen
  yet Ray sleeps `raylet_client_connect_timeout_milliseconds` (1 s) before it tries
  again. In the first job on a fresh cluster both workers' raylet.out had exactly 1.0 s
  between `create_and_mmap_buffer` and "ObjectManager server started" (0.01 s on the
  head). syndeo's Ray now tries every 50 ms, 200 times (Ray's budget of 10 s kept):
  0.00-0.08 s in every raylet of the jobs since. In the bench's warm repetitions the store
  was mostly up at the first try already, so the figures do not move; the bare peer
  (Ray as shipped) keeps Ray's 1 s. The raylet then waits for its two Python agents
  (dashboard and runtime env agents) to write their ports, 0.7-1.3 s, which is Ray's own.
- **The two fixes** (commits bcf2725, 7c68ed4; found in the agents' and Ray's own logs):
  the head is meant to hand the workers the GCS's address as soon as the GCS listens, so
  that their `ray start` overlaps the rest of the head's. It looked for the listener in
  the kernel's IPv4 table only, and Ray's GCS (gRPC on every address) listens dual-stack
  on `[::]:port`, which only the IPv6 table shows: the hand-out never fired, and the
  workers began when the head's `ray start` returned. Second, after it spawns the
  raylet, every `ray start` waits for the node's record through `services.get_node`,
  whose C++ side sleeps a whole second between asks: timed in the launcher, that call
  took 1.03 and 2.01 s of `ray start`'s 1.2-2.8 s. The launcher now asks the GCS every
  50 ms first. The head's `ray start` went from 1.70-2.69 s to 1.24-1.35 s on bubblewrap
  (medians, the phase tables). The bare peer is Ray as shipped: its workers start after
  the head's `ray start` returns and each `ray start` keeps the one-second asks, so its
  times fall on steps about a second apart (3.97-4.04, 4.90-5.24, 5.63-6.38 s above),
  and which step a repetition lands on moves every ratio against it. Tried and left out:
  starting the workers' raylets before the head's registers (Ray 2.60's worker start
  reads the head's record only for its temp and session directories; answered from the
  worker's own `--temp-dir`, 5 jobs on 24.11 took 4.19 s median against 4.44 s from the
  agents' start to ready), because in a heterogeneous job the components' temp
  directories differ.
- **What equal footing showed** (2026-11-26, all three sections): with the peers on the
  image's Python 3.11 (before: the nodes' 3.13 or 3.14), bare `ray start` on bubblewrap
  takes 5-6 s, not 10.6 s: the earlier syndeo/bare of 0.47-0.63 was mostly the
  interpreter. On bubblewrap (22.05, 24.11) syndeo/bare is 0.78-0.98 and throughput
  0.98-1.01 of bare, CPU per 1,000 tasks 1.04: the throughput gap the issue saw
  (0.93-0.95) was the peers' newer Python too. With Apptainer (26.05) syndeo runs the
  SIF, whose files unprivileged Apptainer reads through squashfuse, while the peers read
  the directory it was built from: syndeo/bare 1.35, throughput 0.93, CPU 1.14. The
  Apptainer row puts +120 ms on every container start, the launcher's import of Ray
  takes 1.46 s there against 1.0 s on bubblewrap (agent.log, "the image's Ray loaded"),
  and squashfuse's own CPU counts in the machine's. Since 2026-11-27 the peers run the
  same SIF with `apptainer exec` (above), which takes that cost out of the ratio.
- **bare `ray start`** (the floor): the image's `ray start --head --block`, run in that
  container as the user in node1's namespaces. Once it says "Ray runtime started",
  `ray start --address` runs on the other nodes in parallel, with syndeo's flags
  (CPUs, object store, ports, temp dir) and token auth. Measured from the first launch
  until a check on node1 (`READY_PY` in bench.py) sees 3 nodes active.
- **symmetric-run**: a plain 3-node job whose script runs `srun --nodes=3
  --ntasks-per-node=1 ray symmetric-run --address HEAD:PORT --min-nodes 3 -- python3 …`,
  as Ray's docs say, `ray` in the image's container; the entrypoint is the same check.
  Measured from the script's start to the check's line.
- **sleep template**: Ray's documented sbatch template (head under srun, `sleep 10`, one
  worker at a time each followed by `sleep 5`), then the same check, every `ray` and
  `python3` in the image's container. Measured from the script's start to the check's
  line.
- **teardown**: syndeo's plugin logs `node clean in N ms` after each node's epilog.
  This covers stopping Ray gracefully, killing what is left, and removing the job's
  directories, and ends when the node's agent is gone (reaped). The minicluster runs
  each slurmd under `tests/cluster/reaper.py`, which reaps orphans at once, as systemd
  does on a real node (this machine's own PID 1 reaps only every ~2 s). Bare Ray is
  measured from SIGTERM to its `ray start --block` processes until no process of that
  cluster is left (the signal goes to `ray start` inside its container, not to bwrap).
- **srun cost**: the median of `srun -N1 -n1 true` as a user, with syndeo in plugstack,
  with the snippet moved away, and with an empty plugin in its place
  (`bench/empty_spank.c`: job prolog and epilog hooks that return 0). Nine blocks, each
  side once in every third of the run; Slurm restarts before each block, and each block's
  first two sruns are not counted. Whenever a plugin in plugstack has job prolog or
  epilog hooks, slurmd runs every job's prolog and epilog through a `slurmstepd spank`
  process of its own. Watched with `perf` (exec to exit), that process takes about 3 ms
  here, and the prolog's is on the job's path. The empty plugin pays that too: it is the
  floor for a plugin that starts something on every node of a job. syndeo/empty is what
  syndeo adds on top: loading it in srun, the step's slurmstepd and the prolog's (its
  hooks return at once for a job without `--syndeo`). A `dlopen` of syndeo.so takes
  about 0.3 ms here, against 0.06 ms for the empty plugin; 0.2 ms of that is libgcc_s,
  the unwinder Rust's standard library needs, which Slurm's processes do not otherwise
  load.
- **port holding's cost**: syndeo holds every port it names for Ray (SECURITY.md §4), and
  each process of Ray's container loads syndeo's preload library, whose `bind()` wrapper
  sets `SO_REUSEPORT` on a held port. The row times a Python of the image (the peers'
  container, node1, as the user) that starts, binds a port listed in
  `SYNDEO_HELD_PORTS` and exits, with the library in `LD_PRELOAD` and without, taken in
  turn (the first two of each not counted): what holding adds to every process Ray
  starts. Picking the ports (one `bind()` each, microseconds) is not timed; the ready
  rows include all of it.
- **Apptainer's start** (with Apptainer only): `apptainer --quiet exec --contain IMAGE
  /bin/true` as the user in node1's namespaces, from the SIF and from the sandbox directory
  it was built from, and a bare `/bin/true` the same way, taken in turn; the first two of
  each are not counted. This is the cost Apptainer adds to every container syndeo starts
  (each node's Ray, every `srun --syndeo` step).
- **mesh scale**: the `mesh_bench` example of the mesh simulation (mesh-sim/examples, a
  test-support crate the packages never build) runs N agents' real lifecycle in one process, each with its own
  mesh server on 127.10.x.y and its job directory on tmpfs; the launcher is a no-op that
  says "started" at once. It counts every mesh call served and every view streamed.
  Node 0's agent, which the election makes head, runs on a runtime of its own (two
  threads, as the other agents'); the head's CPU per joining node is those threads' CPU
  time (schedstat) until every node is ready, over N−1. On its own machine a worker does
  its own part (its key, its side of the handshake, its calls) in parallel with all the
  others; what they share is the head, which serves each one's handshake, Join, Watch and
  Report. So the projection for N real nodes is that CPU × (N−1), as if the head had one
  core for it, plus 5 ms for one worker's own path (its CPU and about six round trips).
  It leaves out the spread of the agents' start and Ray. On loopback the head's thread
  also pays the kernel's delivery of what it sends to the workers' sockets.
  Simulated nodes take their port numbers without holding them (a real node holds its
  own, and no Ray binds them here): in one process, every node's holders on 0.0.0.0 made
  each later node's pick scan past all earlier nodes' ports, O(N²) binds (1,024 nodes
  took 15.6 s that way, not 1 s).
- **throughput**: a syndeo cluster and a bare one run at once on the same nodes, in the
  same Slurm job: the bare cluster's `ray start`s and its driver are plain steps of the
  syndeo job (`srun --jobid --overlap`, every CPU of the node, the task's environment
  cleared), so both sides live in the job's cgroups, under its limits and accounting, as
  a user would run Ray by hand in their allocation. Each has one driver on node1: through
  `srun --syndeo` in syndeo's container, and in the peers' container (above) against the
  bare cluster. A side's processes are syndeo's job's minus the bare cluster's steps
  (found by its marker and their step cgroups), and the bare cluster's by its marker;
  neither counts a slurmstepd. Each driver runs 200 warm-up tasks.
  Then the two take turns: one round of 2,000 empty `num_cpus=1` tasks, then the other
  side's round. Which side goes first alternates, so a drift of the machine's speed
  falls on both alike. The table gives the median round of each side over all pairs. The
  CPU row is the machine's busy CPU time (`/proc/stat`, all processes) during each
  side's rounds, per 1,000 tasks. The idle other cluster costs both sides the same. The
  rate moves by about 10% from round to round on these shared cores, and by more from
  one cluster to the next, hence several pairs of fresh clusters. Both sides run the
  image's Python and Ray.
""")


if __name__ == "__main__":
    main()
