"""Another user's flood of a node's privileged ports, where syndeo's mesh
listens (run as user B in a job on another node): for argv[2] seconds, over
and over, it opens connections to every port of the range on the target,
holds some open without a word (slowloris), sends others garbage or a
stalled TLS ClientHello, and drops others at once. Prints what it did.

argv: TARGET_ADDRESS SECONDS LOW-HIGH"""
import errno
import os
import socket
import sys
import time

target, seconds = sys.argv[1], float(sys.argv[2])
lo, hi = (int(x) for x in sys.argv[3].split("-"))
end = time.time() + seconds
held, opened, refused = [], 0, 0
hello = bytes([0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xFF, 0xFF]) + b"\0" * 512
garbage = os.urandom(4096)
kind = 0
while time.time() < end:
    for port in range(lo, hi + 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex((target, port))
        if rc not in (0, errno.EINPROGRESS):
            refused += 1
            s.close()
            continue
        opened += 1
        kind = (kind + 1) % 4
        try:
            if kind == 1:
                s.send(garbage)
            elif kind == 2:
                s.send(hello)
        except OSError:
            pass
        if kind == 3:
            s.close()
        else:
            held.append(s)
        if len(held) > 800:
            held.pop(0).close()
    time.sleep(0.05)
print("FLOOD opened", opened, "refused", refused, "held", len(held), flush=True)
