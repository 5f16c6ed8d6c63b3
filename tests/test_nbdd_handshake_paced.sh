#!/usr/bin/env bash
# A client in the handshake that pipelines options (LIST) and reads their
# replies slowly but without a break is paced, not closed: nbdd stops
# reading it while 64K of replies wait unsent, and that pause is nbdd's,
# not the client's. --io-timeout 1 must not close it as "no byte for 1 s
# in the handshake" (the client's options sat unread in nbdd's buffer);
# a client that reads nothing is still closed (took no reply bytes), and
# so is one that stops mid-option with its few replies unread.
set -u
SEG_PREFIX=nbdd-hs-paced
. "$(dirname "$0")/lib.sh"
SUPPORT=$(cd "$(dirname "$0")" && pwd)/support

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M 2> "$DIR/vlmcd.log" &
pids+=($!)
wait_bound 2
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/nbd.sock" --io-timeout 1 \
	--log-level info 2> "$DIR/nbdd.log" & nbdd=$!
pids+=($nbdd)
wait_bound 4
for _ in $(seq 100); do [ -S "$DIR/nbd.sock" ] && break; sleep 0.05; done

SUPPORT="$SUPPORT" timeout 120 python3 - "$DIR/nbd.sock" > "$DIR/client.log" 2>&1 <<'PY'
import os, socket, struct, sys, threading, time
sys.path.insert(0, os.environ["SUPPORT"])
import nbd_raw_client as R
R.args = type("A", (), {"case": "handshake-paced", "addr": sys.argv[1]})()
N = 6000    # LIST replies for one export: 47 bytes each, about 280K
s = R.connect(sys.argv[1], timeout=30)
R.recv_exact(s, 18)
s.sendall(struct.pack(">I", 1))
opts = (R.IHAVEOPT + struct.pack(">II", R.OPT_LIST, 0)) * N
threading.Thread(target=s.sendall, args=(opts,), daemon=True).start()
time.sleep(0.5)
# about 100K a second: the unsent replies keep nbdd from reading this
# connection for seconds at a time, while the socket always takes bytes
acks, buf, start = 0, b"", time.time()
while acks < N:
    try:
        chunk = s.recv(5000)
    except (ConnectionResetError, BrokenPipeError):
        chunk = b""
    if not chunk:
        R.fail("closed by nbdd after %d of %d LIST replies (%.1f s), reading all along"
               % (acks, N, time.time() - start))
    buf += chunk
    while len(buf) >= 20:
        _, opt, rtype, length = struct.unpack(">QIII", buf[:20])
        if len(buf) < 20 + length:
            break
        if rtype == R.REP_ACK:
            acks += 1
        elif rtype != R.REP_SERVER:
            R.fail("LIST reply type %#x" % rtype)
        buf = buf[20 + length:]
    time.sleep(0.05)
if buf:
    R.fail("%d bytes after the last reply" % len(buf))
# the connection still works: GO, a READ
s.settimeout(10)
data = struct.pack(">I", 3) + b"vol" + struct.pack(">H", 0)
s.sendall(R.IHAVEOPT + struct.pack(">II", R.OPT_GO, len(data)) + data)
while True:
    _, opt, rtype, length = struct.unpack(">QIII", R.recv_exact(s, 20))
    R.recv_exact(s, length)
    if rtype == R.REP_ACK:
        break
R.read(s, 1, 0, 4096)
print("all %d LIST replies read in %.1f s, then served" % (N, time.time() - start))
PY
rc=$?
cat "$DIR/client.log"
[ $rc = 0 ] || fail "a slow but steady reader in the handshake was not served"

echo "--- a client that reads nothing is still closed"
SUPPORT="$SUPPORT" timeout 60 python3 - "$DIR/nbd.sock" > "$DIR/client2.log" 2>&1 <<'PY'
import os, socket, struct, sys, threading, time
sys.path.insert(0, os.environ["SUPPORT"])
import nbd_raw_client as R
R.args = type("A", (), {"case": "handshake-unread", "addr": sys.argv[1]})()
s = R.connect(sys.argv[1], timeout=30)
R.recv_exact(s, 18)
s.sendall(struct.pack(">I", 1))
opts = (R.IHAVEOPT + struct.pack(">II", R.OPT_LIST, 0)) * 12000
threading.Thread(target=s.sendall, args=(opts,), daemon=True).start()
time.sleep(3)   # nothing read: nbdd must close it (--io-timeout 1)
s.settimeout(10)
try:
    while s.recv(65536):
        pass
except (ConnectionResetError, BrokenPipeError):
    pass
except socket.timeout:
    R.fail("a client that reads no reply is still open")
print("closed")
PY
rc=$?
cat "$DIR/client2.log"
[ $rc = 0 ] || fail "a client reading nothing in the handshake was not closed"
grep -q "took no reply bytes" "$DIR/nbdd.log" || fail "no 'took no reply bytes' line for it"

echo "--- a client that stops mid-option, its few replies unread in the kernel, is closed"
# Its replies all fit in the socket's buffer (nbdd waits for no EPOLLOUT),
# so only the read side's clock can close it: unread bytes in the socket
# must spare a client only while it reads them.
SUPPORT="$SUPPORT" timeout 60 python3 - "$DIR/nbd.sock" > "$DIR/client3.log" 2>&1 <<'PY'
import os, select, socket, struct, sys, time
sys.path.insert(0, os.environ["SUPPORT"])
import nbd_raw_client as R
R.args = type("A", (), {"case": "handshake-stalled", "addr": sys.argv[1]})()
s = R.connect(sys.argv[1], timeout=30)
R.recv_exact(s, 18)
s.sendall(struct.pack(">I", 1))
s.sendall((R.IHAVEOPT + struct.pack(">II", R.OPT_LIST, 0)) * 50 + R.IHAVEOPT[:4])
start = time.time()
# nothing read, nothing more sent: closed (--io-timeout 1), which the
# client sees as the peer's hang-up without reading (a read would end the
# test's point: the replies read, nothing is left unread)
p = select.poll()
p.register(s, select.POLLRDHUP)
if not p.poll(6000):
    R.fail("a client stalled mid-option with unread replies is still open after 6 s")
print("closed after %.1f s" % (time.time() - start))
PY
rc=$?
cat "$DIR/client3.log"
[ $rc = 0 ] || fail "a client stalled in the handshake with unread replies was not closed"
grep -q "no byte for 1 s in the handshake" "$DIR/nbdd.log" || fail "no 'no byte' line for it"
kill -0 $nbdd || fail "nbdd died"
echo ok
