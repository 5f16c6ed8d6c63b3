#!/usr/bin/env bash
# TRIM and WRITE_ZEROES take no client buffer, but their chunks are nbdd's
# in the segment's heap like a WRITE's: up to 8 of --chunk-size in flight
# per command, each a power-of-two block (a 1M chunk takes 2M). They must
# count against --max-client-buffer and --max-buffer-total as the chunks
# they may hold, else a client that pipelines large ones while the target
# stops answering takes the whole heap: on a 32M heap with filed
# SIGSTOPped, 12 WRITE_ZEROES and 4 TRIMs of 8M on one connection must
# leave nbdd at most half the heap (and a chunk) and another client of the
# segment an 8M buffer. After SIGCONT every one is answered done and the
# ranges read back as zeros.
set -u
SEG_PREFIX=nbdd-zheap
. "$(dirname "$0")/lib.sh"
SUPPORT=$(cd "$(dirname "$0")" && pwd)/support

. "$(dirname "$0")/path_lib.sh"
path_start 1024 32M 256M
"$BIN/nulld" --segment "$SEG" --port 5 2> "$DIR/nulld.log" & pids+=($!)
wait_bound 5
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/nbd.sock" \
	--log-level info 2> "$DIR/nbdd.log" & nbdd=$!
pids+=($nbdd)
wait_bound 4
for _ in $(seq 100); do [ -S "$DIR/nbd.sock" ] && break; sleep 0.05; done
heap_used() { "$BIN/xseg" info --segment "$SEG" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['heap_used'])"; }

kill -STOP $filed
# Sends everything at once (a thread: nbdd paces the connection), then
# waits for the replies: ok when all are done, then reads them back.
SUPPORT="$SUPPORT" timeout 120 python3 - "$DIR/nbd.sock" > "$DIR/client.out" 2>&1 <<'PY' & client=$!
import os, struct, sys, threading
sys.path.insert(0, os.environ["SUPPORT"])
import nbd_raw_client as R
R.args = type("A", (), {"case": "zeroes-heap", "addr": sys.argv[1]})()
s = R.connect(sys.argv[1], timeout=60)
R.handshake(s, b"vol")
N, LEN = 16, 8 << 20
reqs = b"".join(struct.pack(">IHHQQI", R.REQ_MAGIC, 0, R.TRIM if i % 4 == 3 else R.WRITE_ZEROES,
                            i, i * LEN, LEN) for i in range(N))
threading.Thread(target=s.sendall, args=(reqs,), daemon=True).start()
for _ in range(N):
    error, cookie = R.reply(s)
    if error:
        R.fail("command %d failed: error %d" % (cookie, error))
for i in range(N):
    for j in range(0, LEN, 1 << 20):
        if R.read(s, 1000, i * LEN + j, 1 << 20) != bytes(1 << 20):
            R.fail("%d bytes at %d do not read back as zeros" % (1 << 20, i * LEN + j))
print("all done")
PY
last=-1 used=0
for _ in $(seq 40); do   # until nbdd's share stops growing
	sleep 0.25
	used=$(heap_used)
	[ "$used" = "$last" ] && [ "$used" -gt 0 ] && break
	last=$used
done
echo "heap used with filed stopped: $((used >> 20))M of 32M"
[ "$used" -ge $((2 << 20)) ] || { kill -CONT $filed; fail "the commands did not reach the path (heap used $used)"; }
if [ "$used" -gt $((18 << 20)) ]; then
	kill -CONT $filed
	fail "nbdd's TRIM and WRITE_ZEROES chunks took $((used >> 20))M of the 32M heap (at most half, and a chunk)"
fi
"$BIN/xreq" --segment "$SEG" --port 9 --target-port 5 --op write --target other --size 8388608 \
	--data x > "$DIR/xreq.out" 2>&1 ||
	{ cat "$DIR/xreq.out"; kill -CONT $filed; fail "another client got no 8M buffer while filed was stopped"; }
kill -CONT $filed
wait $client || { cat "$DIR/client.out"; fail "the client"; }
kill -TERM $nbdd; wait $nbdd || fail "nbdd exited $? on SIGTERM"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "TRIM and WRITE_ZEROES stay within nbdd's share of the heap: ok"
