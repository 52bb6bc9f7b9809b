"""syndeo's hook for drivers run on the host in a syndeo job (plain `srun
python3 ...`, or the batch script): the job's steps get this directory first
on PYTHONPATH. When the program imports Ray, and this Python's Ray (or
Python) differs from the one the job's cluster runs, it says so in one line
on stderr and suggests `srun --syndeo`, which runs the driver in the job's
image. Nothing else changes: Ray's import goes on as before, and any other
sitecustomize on the path still runs (this one hands over to it).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _cluster():
    import json
    with open(os.path.join(_HERE, "syndeo_cluster.json")) as f:
        return json.load(f)


def _local_ray():
    """This Python's Ray version without importing Ray, or None if it has none."""
    import importlib.machinery
    spec = importlib.machinery.PathFinder.find_spec("ray", [p for p in sys.path if os.path.abspath(p or ".") != _HERE])
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        try:
            with open(os.path.join(d, "_version.py")) as f:
                for line in f:
                    if line.startswith("version"):
                        return line.split("=", 1)[1].strip().strip("\"'")
        except OSError:
            pass
    return "unknown"


def _check():
    try:
        want = _cluster()
    except (OSError, ValueError):
        return  # this node's Ray has not started: nothing to compare with
    mine = _local_ray()
    py = "%d.%d" % sys.version_info[:2]
    theirs = "Ray %s on Python %s" % (want.get("ray"), want.get("python_minor"))
    if mine is None:
        found = "has no Ray"
    elif mine != want.get("ray") or py != want.get("python_minor"):
        found = "has Ray %s on Python %s" % (mine, py)
    else:
        return
    sys.stderr.write(
        "syndeo: this Python (%s) %s, but the job's Ray cluster runs %s: run the driver in the job's image "
        "with `srun --syndeo %s ...`\n" % (sys.executable, found, theirs, os.path.basename(sys.executable or "python3"))
    )


class _WatchRayImport:
    """On the first `import ray`: the check, once; then out of the way."""

    def find_spec(self, name, path=None, target=None):
        if name == "ray":
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                _check()
            except Exception:
                pass
        return None


def _hand_over():
    """Runs the sitecustomize this one hides, if there is one."""
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


sys.meta_path.insert(0, _WatchRayImport())
_hand_over()
