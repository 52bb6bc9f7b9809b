"""syndeo's Ray launcher: runs inside the job's container on each node, as the
job user, as the first process of the container's own PID namespace. The node
agent writes it into the job's temp dir and runs it by path.

Protocol with the node agent (lines on stdout; Ray's own output goes to stderr,
which is the node's ray.log):
  SYNDEO_LAUNCHER_READY <json>   Ray is importable; waiting for `ray start` arguments.
                                 The JSON says what the image has: {"ray": version,
                                 "python": version, "flags": [ray start's long options],
                                 "preload": whether syndeo's preload library loaded
                                 (null: the agent named none),
                                 "dashboard": whether Ray's dashboard is installed}
  SYNDEO_RAY_STARTED             `ray start` returned: this node joined the cluster
                                 (and, where the raylet was told its dashboard agent's
                                 port, this node's Ray agents are up: agents_up)
  SYNDEO_RAY_FAILED <message>    Ray could not start; the message says why
  SYNDEO_RAY_DIED                this node's raylet ended while the job ran
  SYNDEO_RAY_SEES <n>            (head, when asked) Ray's own status lists n nodes active
  SYNDEO_RAY_SEES_LATE <message> (head, when asked) it did not within the limit; why
stdin: one JSON line {"args": [...], "raylet_args": [...], "env": {...}} (the
agent's `RayStart`) with the `ray start` arguments, what the raylet's own
command line gets besides, and the secrets (the auth token), which never
appear on a command line; then,
on the head, {"expect": n, "gcs": "ip:port", "limit": s} when the agents
count n nodes joined; end of stdin means "stop": every process of this
namespace gets SIGTERM, then SIGKILL.
"""
import json
import os
import select
import shutil
import signal
import sys
import time

# Set by main(): the protocol channel, a private copy of stdout.
PROTO = None
# Set by raylet_told when it changed the raylet's command: the raylet's
# "node_id" and "session_dir", from that command.
RAYLET = {}


def say(*words):
    print(*words, file=PROTO, flush=True)


def others():
    """Every process of this PID namespace but init (1) and this one."""
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]


def reap():
    """`ray start` ran in this process, so Ray's daemons are its children: a
    dead one is a zombie until reaped here."""
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
    """Waits up to `timeout` s for the agent's word on stdin; its end means
    stop. Returns the line the agent sent, if any."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if not ready:
        return None
    line = sys.stdin.readline()
    if not line:
        stop_all(0)
    return line


def stop_all(code):
    """Ends every process of this PID namespace and exits with `code`.

    Our own PID namespace: -1 reaches exactly this job's Ray on this node. As
    Ray's own shutdown (node.py, _kill_process_impl) does, each process gets
    1 s after SIGTERM; Ray's processes still starting up often ignore SIGTERM
    that long, and nothing of theirs outlives the job anyway."""
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        try:
            os.kill(-1, sig)
        except ProcessLookupError:
            pass
        end = time.time() + grace
        while time.time() < end:
            reap()
            if not others():
                break
            time.sleep(0.05)
    sys.exit(code)


def load_ray():
    """Ray's modules load here, while the election runs and the head comes up;
    `ray start` then runs in this process and does not load them again."""
    if not shutil.which("ray"):
        say("SYNDEO_RAY_FAILED", "the image has no `ray` command on its PATH; install Ray in the image (pip install ray)")
        sys.exit(3)
    try:
        from ray.scripts.scripts import cli
    except Exception as e:
        say("SYNDEO_RAY_FAILED", f"`import ray` fails in the image: {e}")
        sys.exit(3)
    return cli


def image_facts(cli):
    """The image's Ray and Python versions and `ray start`'s options: the
    agent fits its arguments to them (ray_version.rs)."""
    import platform
    import ray
    flags = None
    try:
        start = cli.get_command(None, "start")
        flags = sorted({o for p in start.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")})
    except Exception:
        pass
    return {"ray": getattr(ray, "__version__", "unknown"), "python": platform.python_version(), "flags": flags,
            "preload": preload_loaded(), "dashboard": has_dashboard()}


def has_dashboard():
    """Whether the image's Ray has its dashboard (`ray[default]`): Ray's own
    test, by the name of its release (older ones: check_..._installed)."""
    try:
        from ray._private import utils
    except Exception:
        return False
    try:
        if hasattr(utils, "get_dashboard_dependency_error"):
            return utils.get_dashboard_dependency_error() is None
        return bool(utils.check_dashboard_dependencies_installed())
    except Exception:
        return False


def preload_loaded():
    """Whether the preload library the agent named in LD_PRELOAD is mapped in
    this process: then Ray's binds of the held ports join their holders.
    None when the agent named none (its install has none)."""
    lib = os.environ.get("LD_PRELOAD", "")
    if not lib:
        return None
    try:
        with open("/proc/self/maps") as f:
            return any(line.rstrip().endswith(lib) for line in f)
    except OSError:
        return False


def client_port_if_supported(args):
    """Whenever the image has the Ray client's dependencies (grpc), `ray start
    --head` runs the client server, on port 10001 unless told: every job on
    the node would want the same port. syndeo names a port of the job's own;
    without those dependencies Ray refuses the flag, so it is dropped."""
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


def ray_start(cli, args):
    """`ray start ARGS` in this process; None when it worked, else why not."""
    try:
        cli.main(args=["start", *args], prog_name="ray", standalone_mode=False)
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


def registration_polled():
    """After `ray start` has spawned this node's raylet, Ray waits for the
    raylet's record in the GCS through `services.get_node`, whose C++ side
    (GlobalStateAccessor::GetNode) asks and then sleeps a whole second
    while the record is missing: each `ray start` returns up to a second
    after its raylet registered. Here the record is asked for every 50 ms
    first, and Ray's own call then finds it at once. Only where this Ray has
    `services.get_node(gcs_address, node_id)`; on any trouble Ray's own wait
    has the last word, within its own limit."""
    try:
        import ray._private.services as services
        from ray._raylet import GcsClient
        from ray.core.generated.gcs_pb2 import GcsNodeInfo
    except Exception:
        return
    asks = getattr(services, "get_node", None)
    if asks is None:
        return

    def registered(client, node_id):
        nodes = client.get_all_node_info(timeout=2)
        return any(k.hex() == node_id and v.state == GcsNodeInfo.GcsNodeState.ALIVE for k, v in nodes.items())

    def get_node(gcs_address, node_id, *rest, **kw):
        end = time.time() + 30
        try:
            client = GcsClient(address=gcs_address)
            while time.time() < end and not registered(client, node_id):
                stop_on_eof(0.05)
        except Exception:
            pass
        return asks(gcs_address, node_id, *rest, **kw)

    services.get_node = get_node


def raylet_told(extra):
    """`extra` (from the agent's `ray_version::raylet_args`) added to the
    raylet's command line, which `ray start` builds: from Ray 2.54 the
    dashboard agent's listen port, which `ray start` does not pass though
    syndeo chose it, so that the raylet does not wait for the agent to
    write it to a file (a fixed 15 s, then the raylet aborts). Only where
    this Ray has `services.start_ray_process(command, process_type, ...)`."""
    if not extra:
        return
    try:
        import ray._private.services as services
        from ray._private.ray_constants import PROCESS_TYPE_RAYLET
    except Exception:
        return
    start = getattr(services, "start_ray_process", None)
    if start is None:
        return

    def start_ray_process(command, process_type, *rest, **kw):
        if process_type == PROCESS_TYPE_RAYLET:
            command = list(command) + [a for a in extra if a not in command]
            for a in command:
                for key in ("node_id", "session_dir"):
                    if a.startswith(f"--{key}="):
                        RAYLET[key] = a.split("=", 1)[1]
        return start(command, process_type, *rest, **kw)

    services.start_ray_process = start_ray_process


def agents_up(limit):
    """Where raylet_told spared the raylet its wait for the dashboard agent,
    the node joins the cluster as soon as its raylet registers, while its
    agents (the dashboard agent, the runtime env agent: Python processes the
    raylet started) are still starting. They serve the job API, logs and
    runtime envs, and on a busy node their start-up delays the job's first
    workers there. So this node says it started only once each agent wrote
    its port to the session dir (Ray's own files, the one the raylet waited
    for among them), polled every 50 ms, as long as the raylet lives and at
    most `limit` s; past it the node goes on without them, where the
    raylet would have aborted. Only where this Ray names those files
    (ray._raylet's get_port_filename)."""
    if "node_id" not in RAYLET or "session_dir" not in RAYLET:
        return
    try:
        import ray._raylet as raylet
        names = [getattr(raylet, n) for n in ("DASHBOARD_AGENT_LISTEN_PORT_NAME", "RUNTIME_ENV_AGENT_PORT_NAME")
                 if hasattr(raylet, n)]
        paths = [os.path.join(RAYLET["session_dir"], raylet.get_port_filename(RAYLET["node_id"], n)) for n in names]
    except Exception:
        return
    end = time.time() + limit
    while time.time() < end and not all(os.path.exists(p) for p in paths) and raylet_alive():
        stop_on_eof(0.05)


def idle_dashboard_skipped(args):
    """With `--include-dashboard false`, Ray's head still starts its
    dashboard process, loading only the usage-stats module (syndeo turns
    usage stats off), and `ray start` polls until that process is up, in
    0.1 s steps, before it starts the head's raylet: about half a second on
    the path to ready, and an idle Python for the job's life. Here it is not
    started: Ray's own call answers (None, None), as Ray's does when the
    dashboard fails to start and may (`raise_on_failure` false), which Ray's
    callers take as no dashboard. Only with that flag, and only where this
    Ray has `services.start_api_server(include_dashboard, ...)`; with the
    dashboard on, Ray's own call runs."""
    if ["--include-dashboard", "false"] not in [args[i:i + 2] for i in range(len(args))]:
        return
    try:
        import ray._private.services as services
    except Exception:
        return
    start = getattr(services, "start_api_server", None)
    if start is None:
        return

    def start_api_server(include_dashboard, *rest, **kw):
        if include_dashboard is False:
            return None, None
        return start(include_dashboard, *rest, **kw)

    services.start_api_server = start_api_server


def active_nodes(status):
    """How many nodes Ray's own status report (what `ray status` prints)
    lists as active: the autoscaler's count where it reports one, else the
    nodes the report has resources of."""
    report = json.loads(status)
    active = (report.get("autoscaler_report") or {}).get("active_nodes")
    if isinstance(active, dict):
        return sum(active.values())
    return len((report.get("load_metrics_report") or {}).get("usage_by_node") or {})


def await_active(expect, gcs, limit):
    """The head, once the agents count `expect` nodes joined: waits until
    Ray's monitor reports them all active (the status `ray status` prints,
    which the monitor writes every AUTOSCALER_UPDATE_INTERVAL_S; syndeo sets
    1 s), polling every 50 ms. Each node's resources reached the GCS by
    then, so the schedulers' views have them too."""
    end, seen, why = time.time() + limit, 0, "no status report yet"
    try:
        from ray._raylet import GcsClient
        client = GcsClient(address=gcs)
    except Exception as e:
        say("SYNDEO_RAY_SEES_LATE", f"cannot ask the GCS: {e}")
        return
    while time.time() < end:
        try:
            status = client.internal_kv_get(b"__autoscaling_status", None, timeout=2)
            if status:
                seen = active_nodes(status)
                why = f"Ray's status lists {seen} of {expect} nodes active"
                if seen >= expect:
                    say("SYNDEO_RAY_SEES", seen)
                    return
        except Exception as e:
            why = f"asking the GCS: {type(e).__name__}: {e}"
        if stop_on_eof(0.05) is not None:
            break
    say("SYNDEO_RAY_SEES_LATE", why)


def watch_raylet():
    """Until the agent says stop: report this node's raylet ending; answer
    the agent's questions."""
    while True:
        line = stop_on_eof(0.5)
        if line and line.strip():
            ask = json.loads(line)
            if "expect" in ask:
                await_active(int(ask["expect"]), ask["gcs"], float(ask.get("limit", 20)))
        if not raylet_alive():
            say("SYNDEO_RAY_DIED")
            stop_all(5)


def main():
    global PROTO
    # The protocol channel is a private copy of stdout; fd 1 itself becomes
    # stderr (the node's ray.log), so nothing Ray or its daemons print can
    # reach the agent as a protocol line.
    PROTO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    cli = load_ray()
    say("SYNDEO_LAUNCHER_READY", json.dumps(image_facts(cli)))
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    msg = json.loads(line)
    args = client_port_if_supported(msg["args"])
    os.environ.update(msg.get("env", {}))
    signal.signal(signal.SIGTERM, lambda *_: stop_all(0))
    wait_for_head(args, 120)
    registration_polled()
    raylet_told(msg.get("raylet_args", []))
    idle_dashboard_skipped(args)
    err = ray_start(cli, args)
    sys.stdout.flush()
    if err:
        say("SYNDEO_RAY_FAILED", err)
        stop_all(4)
    agents_up(60)
    say("SYNDEO_RAY_STARTED")
    watch_raylet()


if __name__ == "__main__":
    main()
