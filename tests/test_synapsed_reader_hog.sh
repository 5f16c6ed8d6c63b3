#!/usr/bin/env bash
# A client that sends READs and never reads their replies must hold no more
# than its share of --max-inflight-bytes (a quarter, at least the largest
# request). A reply queued for it used to give its request's reservation
# back to the connection at once (the frame was charged to the total only),
# so the hog kept being read: with 600M one such client held about all of
# it and a fresh connection's 32 MiB READ got no reply. Now a reply holds
# its request's place on its connection until written: the hog waits at
# its share, the newcomer is served.
#   python (X: 30 READs of 32 MiB, never reads; Y: one READ) -> synapsed -> nulld
set -u
SEG_PREFIX=synapsed-hog
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 256 --heap 256M || fail "create B"
"$BIN/nulld" --segment "$SEGB" --port 1 --threads 2 2> "$DIR/nulld.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
PORT=$(free_port)
# 600M: a connection's share is max(600M / 4, 128M + 255) = 150M.
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 1 \
	--max-inflight-bytes 600M --timeout 120 --log-level info 2> "$DIR/synapsed.log" & bpid=$!
pids+=($bpid)
wait_bound_in "$SEGB" 2
python3 - "$PORT" > "$DIR/clients.out" 2>&1 <<'PY'
import socket, struct, sys, time
port = int(sys.argv[1])
def read(fid, size):
    return struct.pack('<IHBBIIQQQQiIQ', 0x4e595358, 1, 1, 0, 1, 0, fid, 0, size, 0, 0, 4,
                       0) + b'obj1'
x = socket.socket()
x.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
x.connect(("127.0.0.1", port))
x.sendall(b''.join(read(i, 32 << 20) for i in range(30)))
time.sleep(3)   # B takes what it will of X's 960 MiB of READs
y = socket.create_connection(("127.0.0.1", port))
y.sendall(read(1000, 32 << 20))
y.settimeout(10)
got, t0 = b'', time.time()
try:
    while len(got) < 64:
        d = y.recv(64 - len(got))
        if not d:
            break
        got += d
except socket.timeout:
    pass
if len(got) == 64 and struct.unpack('<Q', got[16:24])[0] == 1000:
    print('Y served after %.1f s' % (time.time() - t0))
else:
    print('Y: no reply to its 32 MiB READ in 10 s (%d bytes)' % len(got))
x.close()
y.close()
PY
cat "$DIR/clients.out"
grep -q "^Y served" "$DIR/clients.out" ||
	fail "a client that does not read its replies starved a fresh connection"
# The hog waited at its share, not at the total.
grep -q "waits for --max-inflight-bytes" "$DIR/synapsed.log" ||
	fail "the hog never waited for room: $(tail -3 "$DIR/synapsed.log")"
kill -TERM "$bpid"; wait "$bpid" || fail "synapsed exited non-zero on SIGTERM"
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed reader hog: ok"
