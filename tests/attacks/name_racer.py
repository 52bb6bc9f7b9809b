"""The job's own user, from another of their jobs on the same node, for
argv[3] seconds (or until a file `stop` appears in the working directory):
races every name syndeo's root side creates, or once created, where this
user can write, for job ids argv[1] .. argv[1]+argv[2]-1: `failed` in each
job's runtime directory as soon as it appears (a file, a FIFO, a link to
/dev/zero, in turn), the note itself in root's notes directory, and the names
the epilog's removal once moved directories up under in the job's temp
directory. Prints PLANTED_FAILED n, PLANTED_NOTE n and PLANTED_RM n."""
import os
import sys
import time

first, count = int(sys.argv[1]), int(sys.argv[2])
end = time.time() + float(sys.argv[3])
counts = {"PLANTED_FAILED": 0, "PLANTED_NOTE": 0, "PLANTED_RM": 0}
kinds = ("file", "fifo", "link")
turn = 0


def plant(path, kind):
    try:
        if kind == "file":
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            os.symlink("/dev/zero", path)
        return 1
    except OSError:
        return 0


while time.time() < end and not os.path.exists("stop"):
    for job in range(first, first + count):
        kind = kinds[turn % len(kinds)]
        turn += 1
        if os.path.isdir(f"/run/syndeo/{job}"):
            counts["PLANTED_FAILED"] += plant(f"/run/syndeo/{job}/failed", kind)
        counts["PLANTED_NOTE"] += plant(f"/run/syndeo/.notes/{job}", kind)
        temp = f"/tmp/syndeo/{job}"
        if os.path.isdir(temp):
            for n in range(1, 20):
                counts["PLANTED_RM"] += plant(f"{temp}/.syndeo-rm-{n}", "file")
    time.sleep(0.0005)
for name, n in counts.items():
    print(name, n, flush=True)
