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
import json, os, select, shutil, signal, subprocess, sys, time

def say(*words):
    print(*words, flush=True)

def others():
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            pids.append(int(name))
    return pids

def raylet_alive():
    for pid in others():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "raylet":
                    return True
        except OSError:
            pass
    return False

def stop_all(code):
    # Our own PID namespace: -1 reaches exactly this job's Ray on this node.
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
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
    import ray as _preload  # loads Ray's modules while the head comes up
except Exception as e:
    say("SYNDEO_RAY_FAILED", f"`import ray` fails in the image: {e}")
    sys.exit(3)
say("SYNDEO_LAUNCHER_READY")

line = sys.stdin.readline()
if not line:
    sys.exit(0)
msg = json.loads(line)
args = msg["args"]
os.environ.update(msg.get("env", {}))
signal.signal(signal.SIGTERM, lambda *_: stop_all(0))
rc = subprocess.call([ray, "start", *args], stdin=subprocess.DEVNULL, stdout=sys.stderr)
if rc != 0:
    say("SYNDEO_RAY_FAILED", f"`ray start` exited with status {rc}")
    stop_all(4)
say("SYNDEO_RAY_STARTED")

while True:
    ready, _, _ = select.select([sys.stdin], [], [], 0.5)
    if ready and not sys.stdin.readline():
        stop_all(0)
    if not raylet_alive():
        say("SYNDEO_RAY_DIED")
        stop_all(5)
