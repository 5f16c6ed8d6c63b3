#!/usr/bin/env bash
# xseg exporter: "a client that sends nothing, or a bad request, costs at
# most IO_TIMEOUT_S (5 s) before the next one is taken" (exporter.c;
# docs/interfaces.md: "5 s to send it"). A client that trickles its request
# head one byte every 2 s (each recv() under the 5 s SO_RCVTIMEO) must not
# hold the exporter: a scrape arriving meanwhile is answered within ~6 s.
set -u
SEG_PREFIX=xseg-exp-slow
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M || fail "create"
lport=$((20000 + $$ % 20000))
"$BIN/xseg" exporter --segment "$SEG" --listen 127.0.0.1:$lport 2> "$DIR/exporter.log" & pids+=($!)
python3 - "$lport" <<'PY' || fail "the exporter was held by a slow client"
import socket, sys, time, threading
port = int(sys.argv[1])
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close(); break
    except OSError:
        time.sleep(0.05)
slow = socket.create_connection(("127.0.0.1", port))
stop = False
def trickle():
    for b in b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 100:
        if stop: return
        try: slow.send(bytes([b]))
        except OSError: return
        time.sleep(2)
threading.Thread(target=trickle, daemon=True).start()
time.sleep(0.5)
t0 = time.time()
c = socket.create_connection(("127.0.0.1", port))
c.settimeout(15)
c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
try:
    first = c.recv(64)
except socket.timeout:
    first = b""
dt = time.time() - t0
stop = True
print("scrape answered after %.1f s: %r" % (dt, first[:20]))
sys.exit(0 if first.startswith(b"HTTP/1.1 200") and dt < 8 else 1)
PY
echo ok
