"""The job's own user, from their batch script: for every syndeo-agent
process of theirs (the supervisors and the agents, which hold the mesh's
privileged socket root bound as descriptor 3 and the job's state as 4),
tries to read its environment and to take descriptors 3 and 4 with
pidfd_getfd. Prints READ/REFUSED_READ and TAKEN/REFUSED_GETFD per process,
and AGENTS n."""
import ctypes
import os
import subprocess

SYS_PIDFD_GETFD = 438
libc = ctypes.CDLL(None, use_errno=True)
out = subprocess.run(["pgrep", "-u", os.environ["USER"], "-x", "syndeo-agent"], capture_output=True, text=True)
pids = [int(p) for p in out.stdout.split()]
print("AGENTS", len(pids), flush=True)
for pid in pids:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            f.read()
        print("READ", pid, flush=True)
    except OSError as e:
        print("REFUSED_READ", pid, e.errno, flush=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        continue
    for target in (3, 4):
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, target, 0)
        if fd >= 0:
            print("TAKEN", pid, target, os.readlink(f"/proc/self/fd/{fd}"), flush=True)
        else:
            print("REFUSED_GETFD", pid, target, ctypes.get_errno(), flush=True)
