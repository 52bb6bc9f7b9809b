"""Another user, before any syndeo job, and for argv[2] seconds: keeps
planting links to their own trap directory (argv[1]) where root makes its
temp base, and files under the names root might set aside there, hoping the
prolog follows a link or fails (and drains the node); and tries the same in
the shared-memory base, which lies under root-only /run. Prints PLANTED n
and PLANTED_SHM n."""
import os
import sys
import time

trap, end = sys.argv[1], time.time() + float(sys.argv[2])
planted = planted_shm = 0
while time.time() < end:
    base = "/tmp/syndeo"
    try:
        os.symlink(trap, base)
        planted += 1
    except OSError:
        pass
    for guess in (f"{base}.untrusted-{os.getpid()}", f"{base}.new", f"{base}.untrusted"):
        try:
            os.symlink(trap, guess)
        except OSError:
            pass
    for name in ("/run/syndeo-shm", *(f"/run/syndeo-shm/{j}" for j in range(1, 200))):
        try:
            os.symlink(trap, name)
            planted_shm += 1
        except OSError:
            pass
    time.sleep(0.001)
print("PLANTED", planted, flush=True)
print("PLANTED_SHM", planted_shm, flush=True)
