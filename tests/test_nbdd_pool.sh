#!/usr/bin/env bash
# Small NBD commands take few bytes but a request of the segment's pool
# each: with filed SIGSTOPped, 8 clients pipelining 128 4K READs each
# (1024: the pool) must leave the pool's other half to the path and the
# segment's other clients (nbdd used to take every request: another
# client got none). After SIGCONT every READ is answered, none failed.
set -u
SEG_PREFIX=nbdd-pool
. "$(dirname "$0")/lib.sh"
SUPPORT=$(cd "$(dirname "$0")" && pwd)/support

. "$(dirname "$0")/path_lib.sh"
path_start 1024 64M 64M
"$BIN/nulld" --segment "$SEG" --port 5 2> "$DIR/nulld.log" & pids+=($!)
wait_bound 5
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/nbd.sock" \
	--log-level info 2> "$DIR/nbdd.log" & nbdd=$!
pids+=($nbdd)
wait_bound 4
for _ in $(seq 100); do [ -S "$DIR/nbd.sock" ] && break; sleep 0.05; done
grep -q "at most 512 of the pool's 1024 requests out on the path" "$DIR/nbdd.log" ||
	fail "the start log does not say nbdd's share of the pool"
free_requests() { "$BIN/xseg" info --segment "$SEG" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['free_requests'])"; }

kill -STOP $filed
SUPPORT="$SUPPORT" timeout 120 python3 - "$DIR/nbd.sock" > "$DIR/client.out" 2>&1 <<'PY' & client=$!
import os, struct, sys
sys.path.insert(0, os.environ["SUPPORT"])
import nbd_raw_client as R
R.args = type("A", (), {"case": "pool", "addr": sys.argv[1]})()
socks = []
for k in range(8):
    s = R.connect(sys.argv[1], timeout=60)
    R.handshake(s, b"vol")
    s.sendall(b"".join(struct.pack(">IHHQQI", R.REQ_MAGIC, 0, R.READ, i, (k * 128 + i) * 4096, 4096)
                       for i in range(128)))
    socks.append(s)
for s in socks:
    for _ in range(128):
        error, cookie = R.reply(s)
        if error:
            R.fail("READ %d failed: error %d" % (cookie, error))
        R.recv_exact(s, 4096)
print("all done")
PY
last=-1 free=0
for _ in $(seq 40); do   # until nbdd stops taking requests
	sleep 0.25
	free=$(free_requests)
	[ "$free" = "$last" ] && break
	last=$free
done
echo "free requests with filed stopped: $free of 1024"
if [ "$free" -lt 256 ]; then
	kill -CONT $filed
	fail "nbdd's READs left $free of the pool's 1024 requests (it may take half)"
fi
"$BIN/xreq" --segment "$SEG" --port 9 --target-port 5 --op write --target other --size 4096 \
	--data x > "$DIR/xreq.out" 2>&1 ||
	{ cat "$DIR/xreq.out"; kill -CONT $filed; fail "another client got no request while filed was stopped"; }
kill -CONT $filed
wait $client || { cat "$DIR/client.out"; fail "the client"; }
grep -q "requests out on the path: half the segment.s pool" "$DIR/nbdd.log" || fail "no line says clients wait for the pool"
grep -q "failed" "$DIR/nbdd.log" && fail "commands failed"
kill -TERM $nbdd; wait $nbdd || fail "nbdd exited $? on SIGTERM"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "nbdd leaves half the request pool to the others: ok"
