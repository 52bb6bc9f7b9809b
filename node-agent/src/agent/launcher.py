# syndeo's Ray launcher: runs inside the job's container on each node, as the
# job user, as the first process of the container's own PID namespace.
# Protocol with the node agent (lines on stdout; Ray's own output goes to stderr):
#   SYNDEO_LAUNCHER_READY          Ray is importable; waiting for `ray start` arguments
#   SYNDEO_RAY_STARTED             `ray start` returned: this node joined the cluster
#   SYNDEO_RAY_FAILED <message>    Ray could not start; the message says why
#   SYNDEO_RAY_DIED                this node's raylet ended while the job ran
# stdin: one JSON line {"args": [...], "env": {...}} with the `ray start` arguments
# and the secrets (the auth token), which never appear on a command line; end of
# stdin means "stop": every process of this namespace gets SIGTERM, then SIGKILL.
import json, os, select, shutil, signal, sys, time

# The protocol channel is a private copy of stdout; fd 1 itself becomes
# stderr (the node's ray.log), so nothing Ray or its daemons print can
# reach the agent as a protocol line.
_proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)

def say(*words):
    print(*words, file=_proto, flush=True)

def others():
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            pids.append(int(name))
    return pids

def reap():
    # `ray start` ran in this process, so Ray's daemons are its children: a
    # dead one is a zombie until reaped here.
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass

def raylet_alive():
    reap()
    for pid in others():
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, state = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:][:1]
        if name == "raylet" and state != "Z":
            return True
    return False

def stop_on_eof(timeout):
    """Waits up to `timeout` s for the agent's word on stdin; its end means stop."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if ready and not sys.stdin.readline():
        stop_all(0)

def stop_all(code):
    # Our own PID namespace: -1 reaches exactly this job's Ray on this node.
    # As Ray's own shutdown (node.py, _kill_process_impl) does, each process
    # gets 1 s after SIGTERM. Ray's processes still starting up (the runtime
    # env agent, the raylet) often ignore SIGTERM that long; nothing of theirs
    # outlives the job, so waiting longer would buy nothing.
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        try:
            os.kill(-1, sig)
        except ProcessLookupError:
            pass
        end = time.time() + grace
        while time.time() < end:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            if not others():
                break
            time.sleep(0.05)
    sys.exit(code)

ray = shutil.which("ray")
if not ray:
    say("SYNDEO_RAY_FAILED", "the image has no `ray` command on its PATH; install Ray in the image (pip install ray)")
    sys.exit(3)
try:
    # Ray's modules load here, while the election runs and the head comes up;
    # `ray start` then runs in this process and does not load them again.
    from ray.scripts.scripts import cli as ray_cli
except Exception as e:
    say("SYNDEO_RAY_FAILED", f"`import ray` fails in the image: {e}")
    sys.exit(3)
say("SYNDEO_LAUNCHER_READY")

line = sys.stdin.readline()
if not line:
    sys.exit(0)
msg = json.loads(line)
args = msg["args"]

def client_port_if_supported(args):
    # Whenever the image has the Ray client's dependencies (grpc), `ray start
    # --head` runs the client server, on port 10001 unless told: every job on
    # the node would want the same port. syndeo names a port of the job's own;
    # without those dependencies Ray refuses the flag, so it is dropped.
    if "--ray-client-server-port" not in args:
        return args
    try:
        from ray._private.utils import get_ray_client_dependency_error
        if get_ray_client_dependency_error() is None:
            return args
    except Exception:
        pass
    i = args.index("--ray-client-server-port")
    return args[:i] + args[i + 2:]

args = client_port_if_supported(args)
os.environ.update(msg.get("env", {}))
signal.signal(signal.SIGTERM, lambda *_: stop_all(0))
def ray_start(args):
    """`ray start ARGS` in this process; None when it worked, else why not."""
    try:
        ray_cli.main(args=["start", *args], prog_name="ray", standalone_mode=False)
        return None
    except SystemExit as e:
        return None if e.code in (0, None) else f"`ray start` exited with status {e.code}"
    except Exception as e:
        return f"`ray start` failed: {type(e).__name__}: {e}"

def wait_for_head(args, limit):
    """A worker's `ray start` first reads the cluster's session name from the
    head's GCS, then the head node's record; whenever one is not there yet,
    Ray sleeps 2 s before it asks again. The agent hands out the GCS address
    as soon as the GCS accepts connections, to overlap the workers' start
    with the head's, so both are often missing at first: ask here, every
    50 ms, instead. On any trouble, `ray start` itself has the last word."""
    if "--address" not in args:
        return
    gcs = args[args.index("--address") + 1]
    try:
        from ray._raylet import GcsClient
        from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest
        head = GetAllNodeInfoRequest.NodeSelector()
        head.is_head_node = True
    except Exception:
        return
    end = time.time() + limit
    client = None
    while time.time() < end:
        try:
            client = client or GcsClient(address=gcs)
            if (client.internal_kv_get(b"session_name", b"session", timeout=2) is not None
                    and client.get_all_node_info(timeout=2, node_selectors=[head])):
                return
        except Exception:
            pass
        # The agent may stop this container meanwhile (the head stepped down).
        stop_on_eof(0.05)

wait_for_head(args, 120)
err = ray_start(args)
sys.stdout.flush()
if err:
    say("SYNDEO_RAY_FAILED", err)
    stop_all(4)
say("SYNDEO_RAY_STARTED")

while True:
    stop_on_eof(0.5)
    if not raylet_alive():
        say("SYNDEO_RAY_DIED")
        stop_all(5)
