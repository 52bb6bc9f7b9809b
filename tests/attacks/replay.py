"""Another user's replay (run as user B in a job on another node): sends a
recorded client side of a mesh connection (hex, argv[2]) to the server it
was recorded from (argv[1], ADDRESS:PORT), as it was sent, and reports what
came back: REPLAY_SENT n, REPLAY_GOT n, REPLAY_CLOSED yes|no.

argv: ADDRESS:PORT HEX"""
import socket
import sys
import time

host, port = sys.argv[1].rsplit(":", 1)
data = bytes.fromhex(sys.argv[2])
s = socket.create_connection((host, int(port)), timeout=10)
sent = 0
try:
    s.sendall(data)
    sent = len(data)
except OSError:
    pass
got, closed = 0, False
end = time.time() + 8
s.settimeout(1)
while time.time() < end:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        continue
    except OSError:
        closed = True
        break
    if not chunk:
        closed = True
        break
    got += len(chunk)
print("REPLAY_SENT", sent, flush=True)
print("REPLAY_GOT", got, flush=True)
print("REPLAY_CLOSED", "yes" if closed else "no", flush=True)
