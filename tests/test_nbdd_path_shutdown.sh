#!/usr/bin/env bash
# A peer behind nbdd that fails a request with ESHUTDOWN (it is stopping)
# is not nbdd stopping: the client gets NBD_EIO, not NBD_ESHUTDOWN, which
# tells an NBD client that the server itself goes away and that it should
# send nothing more but a disconnect (qemu said "Cannot send after
# transport endpoint shutdown" while nbdd served on). Made here as an
# operator can: `xseg plug` of a write-back cached in front of filed holds
# the requests for filed (parked in cached) while filed is busy (SIGSTOPped
# with a write in it), and cached gets SIGTERM: it fails what it parked,
# ESHUTDOWN. nbdd's own stop still answers NBD_ESHUTDOWN
# (test_nbdd_stop_inflight.sh). Then the path serves again and every
# write acknowledged before reads back.
set -u
SEG_PREFIX=nbdd-path-shutdown
. "$(dirname "$0")/lib.sh"

SUPPORT=$(cd "$(dirname "$0")" && pwd)/support
SOCK=$DIR/nbd.sock

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writeback 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:32M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$SOCK" --log-level info \
	2> "$DIR/nbdd.log" & npid=$!
pids+=($npid)
wait_bound 4
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done

cat > "$DIR/client.py" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from nbd_raw_client import READ, WRITE, DISC, connect, handshake, request, reply, recv_exact
s = connect(sys.argv[2], timeout=60)
handshake(s, b"vol")
mode, off, byte = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if mode == "write":
    request(s, WRITE, 1, off, 4096, bytes([byte]) * 4096)
    print(reply(s)[0])
else:
    request(s, READ, 1, off, 4096)
    err = reply(s)[0]
    print(err if err else ("ok" if recv_exact(s, 4096) == bytes([byte]) * 4096 else "other data"))
request(s, DISC, 2, 0, 0)
EOF
nbd() { timeout 60 python3 "$DIR/client.py" "$SUPPORT" "$SOCK" "$@"; }

[ "$(nbd write 0 1)" = 0 ] || fail "the first write"

# filed busy for good: a write held in it, so the plug's hold lasts.
kill -STOP "$fpid"
nbd write 4096 2 > "$DIR/held.out" & held=$!
pids+=($held)
for _ in $(seq 200); do [ "$(port_info 1 request_depth)" -ge 1 ] && break; sleep 0.05; done
[ "$(port_info 1 request_depth)" -ge 1 ] || fail "the write did not reach filed's queue"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > "$DIR/plug.out" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ "$(port_info 1 next_hop)" = 3 ] && break; sleep 0.05; done
[ "$(port_info 1 next_hop)" = 3 ] || fail "the plug did not route port 1 to cached"

# A write for filed, parked in cached by the hold; cached stops.
nbd write 8192 3 > "$DIR/parked.out" & parked=$!
pids+=($parked)
for _ in $(seq 200); do [ "$(peer_stat 3 plug_parked)" -ge 1 ] && break; sleep 0.05; done
[ "$(peer_stat 3 plug_parked)" -ge 1 ] || fail "cached parked no request"
kill -TERM "$cpid"
wait "$parked" || fail "the parked write's client"
grep -q "parked requests with Cannot send after transport endpoint shutdown" "$DIR/cached.log" ||
	fail "cached did not fail the parked write with ESHUTDOWN (the case is not made)"
got=$(cat "$DIR/parked.out")
echo "the write cached failed with ESHUTDOWN was answered NBD error $got"
[ "$got" = 5 ] || fail "the client got NBD error $got for a path's ESHUTDOWN (108: nbdd \
said it shuts down; 5, NBD_EIO, expected)"

kill -CONT "$fpid"
wait "$held" || fail "the held write's client"
[ "$(cat "$DIR/held.out")" = 0 ] || fail "the write held in filed: error $(cat "$DIR/held.out")"
wait "$cpid"
# nbdd serves on: what was acknowledged reads back, a new write works.
for _ in $(seq 100); do [ "$(nbd write 12288 4)" = 0 ] && break; sleep 0.1; done
[ "$(nbd read 12288 4)" = ok ] || fail "a write after cached's stop"
[ "$(nbd read 0 1)" = ok ] || fail "the first write"
[ "$(nbd read 4096 2)" = ok ] || fail "the write held in filed"
kill -TERM "$npid"; wait "$npid" || fail "nbdd exited $? on SIGTERM"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "ok"
