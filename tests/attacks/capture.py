"""An attacker on the network (run as root by the test: it stands for anyone
who can record the cluster's traffic): records, for argv[2] seconds, every
TCP segment seen on interface argv[1] whose server port lies in argv[3]
(LOW-HIGH), and writes one JSON line per connection: the server's address,
the bytes the client sent (hex, in order of arrival) and how many the
server sent back.

argv: INTERFACE SECONDS LOW-HIGH OUTPUT"""
import json
import socket
import struct
import sys
import time

iface, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[4]
lo, hi = (int(x) for x in sys.argv[3].split("-"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
s.bind((iface, 0))
s.settimeout(0.2)
conns = {}
end = time.time() + seconds
while time.time() < end:
    try:
        frame = s.recv(65535)
    except socket.timeout:
        continue
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        continue
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6:
        continue
    total = struct.unpack("!H", ip[2:4])[0]
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    tcp = ip[ihl:total]
    sport, dport, seq = struct.unpack("!HHI", tcp[:8])
    payload = tcp[(tcp[12] >> 4) * 4:]
    if lo <= dport <= hi:
        key, to_server = (src, sport, dst, dport), True
    elif lo <= sport <= hi:
        key, to_server = (dst, dport, src, sport), False
    else:
        continue
    c = conns.setdefault(key, {"client": {}, "server": 0})
    if to_server and payload:
        c["client"][seq] = payload
    elif payload:
        c["server"] += len(payload)
with open(out, "w") as f:
    for (cip, cport, sip, sport), c in conns.items():
        data = b"".join(c["client"][k] for k in sorted(c["client"]))
        f.write(json.dumps({"server": f"{sip}:{sport}", "client": f"{cip}:{cport}",
                            "client_bytes": data.hex(), "server_bytes": c["server"]}) + "\n")
print("CAPTURED", len(conns), flush=True)
