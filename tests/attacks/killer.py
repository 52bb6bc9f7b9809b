"""The job's own user, from another of their jobs on the same node, tries to
stop or kill syndeo's root-side processes (prolog, start, epilog) whenever
they appear, for argv[1] seconds. Prints KILL_ATTEMPTS n and REFUSED m."""
import os
import signal
import sys
import time

end = time.time() + float(sys.argv[1])
attempts, refused, seen = 0, 0, set()
while time.time() < end:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"syndeo-agent") and argv[1] in (b"prolog", b"start", b"epilog"):
            pid = int(name)
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                attempts += 1
                try:
                    os.kill(pid, sig)
                except PermissionError:
                    refused += 1
                except ProcessLookupError:
                    attempts -= 1
            seen.add(pid)
print("KILL_ATTEMPTS", attempts, flush=True)
print("REFUSED", refused, flush=True)
