"""Another user's squatter (run as user B in a job on a node): binds every
port it can on the node's address that a job's agents or Ray could be
predicted to use, listens, accepts whatever connects and records what it
receives. Prints "SQUATTING <n>" once bound, then on SIGTERM or after
argv[2] seconds "ACCEPTED <n>" and "RECEIVED <hex of the first 4 KiB>".

It holds every unprivileged port outside the kernel's ephemeral range
(where every program's outgoing connections come from: holding those would
stop the node for everyone, Slurm's own srun included), every Ray default
port, and syndeo's former mesh range, 45000-45999. One process may hold only
as many sockets as its descriptor limit allows (a job's is often 20000), so
the ports are shared out among as many processes as that takes.

argv: ADDRESS SECONDS"""
import os
import resource
import select
import signal
import socket
import sys
import time

addr, seconds = sys.argv[1], float(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
lo, hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
ports = [p for p in range(1024, 65536) if not lo <= p <= hi]
ports = sorted(set(ports + list(range(45000, 46000)) + [6379, 8265, 10001, 52365, 44217, 44227, 8076, 8077]))
per_process = hard - 64
chunks = [ports[i:i + per_process] for i in range(0, len(ports), per_process)]
stop = [False]


def squat(chunk, out):
    """Holds the ports of `chunk`; writes "bound accepted hex" to `out` at the end."""
    listeners = []
    for p in chunk:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((addr, p))
            s.listen(16)
            s.setblocking(False)
            listeners.append(s)
        except OSError:
            s.close()
    os.write(out, f"{len(listeners)}\n".encode())
    accepted, received = 0, b""
    poller = select.epoll()
    by_fd = {s.fileno(): s for s in listeners}
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    end = time.time() + seconds
    while not stop[0] and time.time() < end:
        for fd, _ in poller.poll(0.5):
            try:
                conn, _ = by_fd[fd].accept()
            except OSError:
                continue
            accepted += 1
            conn.settimeout(1)
            try:
                received += conn.recv(4096)
            except OSError:
                pass
            conn.close()
    os.write(out, f"{accepted} {received[:4096].hex()}\n".encode())


signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
readers, children = [], []
for chunk in chunks:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        squat(chunk, w)
        os._exit(0)
    os.close(w)
    readers.append(os.fdopen(r))
    children.append(pid)
print("SQUATTING", sum(int(f.readline()) for f in readers), flush=True)
# SIGTERM reaches the parent (srun's task); pass it on.
end = time.time() + seconds
while not stop[0] and time.time() < end:
    time.sleep(0.2)
for p in children:
    try:
        os.kill(p, signal.SIGTERM)
    except ProcessLookupError:
        pass
accepted, received = 0, ""
for f in readers:
    n, _, hexed = f.readline().strip().partition(" ")
    accepted += int(n or 0)
    received += hexed
for p in children:
    os.waitpid(p, 0)
print("ACCEPTED", accepted, flush=True)
print("RECEIVED", received[:8192], flush=True)
