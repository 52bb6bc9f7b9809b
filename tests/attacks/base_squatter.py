"""Another user, before any syndeo job, and for argv[2] seconds: keeps
planting links to their own trap directory (argv[1]) where root makes its
temp and shared-memory bases, and files under the names root might set
aside there, hoping the prolog follows a link or fails (and drains the
node). Prints PLANTED n."""
import os
import sys
import time

trap, end = sys.argv[1], time.time() + float(sys.argv[2])
planted = 0
while time.time() < end:
    for base in ("/tmp/syndeo", "/dev/shm/syndeo"):
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
    time.sleep(0.001)
print("PLANTED", planted, flush=True)
