#!/usr/bin/env bash
# nbdd's stop answers the commands in flight before it closes: two NBD
# clients (one on each of nbdd's two socket threads) send 4 WRITEs each to
# nbdd -> vlmcd -> filed, whose every WRITE sleeps (--delay-us); with all
# 8 out on the path, nbdd gets SIGTERM. Every WRITE must be answered
# (error 0: filed has it, read back below) before nbdd closes, a WRITE
# sent after the stop began must get NBD_ESHUTDOWN and never reach filed,
# and nbdd exits 0. (The old nbdd closed both connections at once: 8
# writes that filed completed, never answered.) Then the bound: with
# filed stopped (SIGSTOP) nbdd closes its client after --stop-timeout,
# saying how many commands were left, and exits; no hang. qemu-io with
# two aio_writes in flight at the SIGTERM: both succeed. Last, the whole
# path stopped by `xseg down` (nbdd first) with 8 WRITEs in flight: all
# answered. Commands read but not yet started at the stop (waiting for
# --max-buffer-total, or behind the connection's --max-inflight) get
# NBD_ESHUTDOWN.
set -u
SEG_PREFIX=nbdd-stop
. "$(dirname "$0")/lib.sh"

T="timeout 120"
CLIENT="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_stop_client.py"
SOCK=$DIR/nbd.sock
CONNS=2 WRITES=4 STRIDE=$((4 << 20))
DELAY_US=2000000   # each of filed's READs and WRITEs: the window for the stop
ESHUTDOWN=108

start_nbdd() {   # start_nbdd LOG [options]: its pid in $npid
	local log=$1; shift
	rm -f "$SOCK"
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$SOCK" \
		--socket-threads 2 --log-level info "$@" 2> "$DIR/$log" & npid=$!
	pids+=($npid)
	wait_bound 4
	for _ in $(seq 200); do [ -S "$SOCK" ] && return 0; sleep 0.05; done
	fail "nbdd made no socket $SOCK"
}

# Waits until nbdd has $1 NBD commands in flight (out on the path).
wait_in_flight() {
	local n=0
	for _ in $(seq 400); do
		n=$(peer_stat 4 in_flight 2>/dev/null || echo 0)
		[ "$n" -ge "$1" ] && return 0
		sleep 0.02
	done
	fail "nbdd has $n commands in flight, not $1"
}

# Waits until nbdd's log $1 says its stop began (5 s at most).
wait_stop_began() {
	for _ in $(seq 250); do grep -q "stop: answering" "$DIR/$1" && return 0; sleep 0.02; done
	echo "nbdd's log says no stop began (going on: the checks below say what happened)"
}

# Waits up to $2 tenths of a second for pid $1 to exit; its status in $rc.
wait_exit() {
	for _ in $(seq "$2"); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$1" 2>/dev/null && fail "nbdd still runs $(($2 / 10)) s after SIGTERM"
	wait "$1"; rc=$?
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 12 --delay-us $DELAY_US \
	2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2

echo "--- SIGTERM with 8 WRITEs in flight on two connections"
start_nbdd nbdd.log
$T $CLIENT write "$SOCK" --conns $CONNS --writes $WRITES --stride $STRIDE --go "$DIR/go" \
	--out "$DIR/replies.json" > "$DIR/client.out" 2>&1 & cpid=$!
wait_in_flight $((CONNS * WRITES))
t0=$(date +%s.%N)
kill -TERM "$npid"
wait_stop_began nbdd.log   # before the late WRITEs go
touch "$DIR/go"
wait "$cpid" || fail "the client failed: $(cat "$DIR/client.out")"
wait_exit "$npid" 300
took=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
echo "nbdd exited $rc after ${took} s; the clients saw:"
python3 - "$DIR/replies.json" <<'EOF'
import json, sys
for c, r in enumerate(json.load(open(sys.argv[1]))):
    print("  connection %d: %d replies %s, then %s after %s s" % (
        c, len(r["replies"]), sorted(r["replies"].values()), r["ended"], r["ended_after"]))
EOF

# What filed holds, through a fresh nbdd.
start_nbdd nbdd-read.log
offsets=$(python3 -c "print(','.join(str(i * $STRIDE) for i in range($((CONNS * WRITES + CONNS)))))")
$T $CLIENT read "$SOCK" --offsets "$offsets" --out "$DIR/blocks.json" ||
	fail "reading the blocks back failed"
kill -TERM "$npid"; wait "$npid" || fail "the reading nbdd exited $? on SIGTERM"

python3 - "$DIR/replies.json" "$DIR/blocks.json" $CONNS $WRITES $STRIDE $ESHUTDOWN <<'EOF' ||
import json, sys
replies, blocks = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
conns, writes, stride, eshutdown = map(int, sys.argv[3:7])
bad = []
unanswered_on_filed = 0
for c, r in enumerate(replies):
    for i in range(writes):
        off = (c * writes + i) * stride
        got = r["replies"].get(str(off))
        if got != 0:
            bad.append("connection %d: WRITE at %d answered %s, filed holds it %s"
                       % (c, off, got, blocks[str(off)]))
            if got is None and blocks[str(off)] == "written":
                unanswered_on_filed += 1
        elif blocks[str(off)] != "written":
            bad.append("WRITE at %d answered 0 but filed holds %s" % (off, blocks[str(off)]))
    extra = (conns * writes + c) * stride
    got = r["replies"].get(str((1 << 40) + c))
    if got != eshutdown:
        bad.append("connection %d: the WRITE sent after the stop began was answered %s, "
                   "not NBD_ESHUTDOWN (%d)" % (c, got, eshutdown))
    if blocks[str(extra)] != "zeros":
        bad.append("connection %d: the WRITE refused in the stop reached filed (%s)"
                   % (c, blocks[str(extra)]))
    if r["ended"] != "closed":
        bad.append("connection %d ended %s, not closed by nbdd" % (c, r["ended"]))
if unanswered_on_filed:
    bad.insert(0, "%d WRITEs that filed completed were never answered: nbdd closed with "
               "them in flight" % unanswered_on_filed)
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
	fail "nbdd's stop lost replies (above)"
[ "$rc" = 0 ] || fail "nbdd exited $rc after answering everything"
grep -E "stop: .*commands? in flight" "$DIR/nbdd.log" ||
	fail "nbdd's log does not say what its stop waited for"
grep -q "refused with ESHUTDOWN" "$DIR/nbdd.log" || fail "the log does not count the ESHUTDOWNs"
echo "every WRITE in flight answered before the close, the late ones NBD_ESHUTDOWN: ok"

echo "--- qemu-io: two aio_writes in flight at the SIGTERM"
start_nbdd nbdd-qemu.log
$T qemu-io -f raw "nbd+unix:///vol?socket=$SOCK" -c "aio_write -P 0x5a 0 64k" \
	-c "aio_write -P 0x5b 8M 64k" -c "aio_flush" > "$DIR/qio.out" 2>&1 & qpid=$!
wait_in_flight 2
kill -TERM "$npid"
wait "$qpid"; qrc=$?
wait_exit "$npid" 300
cat "$DIR/qio.out"
[ "$qrc" = 0 ] && [ "$(grep -c "^wrote 65536/65536" "$DIR/qio.out")" = 2 ] &&
	! grep -qiE "fail|error" "$DIR/qio.out" || fail "qemu-io's writes failed (exit $qrc)"
[ "$rc" = 0 ] || fail "nbdd exited $rc"
echo "qemu-io's writes in flight at the stop succeeded: ok"

echo "--- the bound: filed stopped, --stop-timeout 2"
start_nbdd nbdd-bound.log --stop-timeout 2
kill -STOP "$fpid"
rm -f "$DIR/go"
$T $CLIENT write "$SOCK" --conns 1 --writes 3 --stride $STRIDE --go "$DIR/go" \
	--out "$DIR/bound.json" > "$DIR/client.out" 2>&1 & cpid=$!
wait_in_flight 3
t0=$(date +%s.%N)
kill -TERM "$npid"
wait_stop_began nbdd-bound.log
touch "$DIR/go"
wait "$cpid" || fail "the client failed: $(cat "$DIR/client.out")"
closed=$(python3 -c "import json; r = json.load(open('$DIR/bound.json'))[0]; print(r['ended'], r['ended_after'], len(r['replies']))")
echo "the client's connection: $closed (ended, seconds, replies)"
wait_exit "$npid" 200
took=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
kill -CONT "$fpid"
echo "nbdd exited $rc after $took s"
set -- $closed
[ "$1" = closed ] || [ "$1" = reset ] || fail "the connection ended '$1', not closed by nbdd"
python3 -c "import sys; sys.exit(not 1.5 <= $2 <= 10)" ||
	fail "the connection was closed after $2 s, not at --stop-timeout (2 s)"
[ "$rc" != 0 ] || fail "nbdd exited 0 with commands unanswered"
grep -E "stop: 3 commands? unanswered .*after --stop-timeout 2 s" "$DIR/nbdd-bound.log" ||
	fail "nbdd's log does not say how many commands its stop left"
echo "closed at the bound, the unanswered commands counted: ok"

echo "--- commands read but not started at the stop: each gets NBD_ESHUTDOWN"
# Found by review: "drained" counted only started commands, so a
# connection whose command waited for --max-buffer-total (B), or behind
# its own --max-inflight (C's second), was closed unanswered ("every
# command answered", exit 0).
SUPPORT=$(cd "$(dirname "$0")" && pwd)/support
# replies: what a raw client got after the SIGTERM (sorted (cookie,
# error) pairs, then how the connection ended)
cat > "$DIR/replies.py" <<'EOF'
import socket, struct
def replies(s):
    s.settimeout(20); got = []; buf = b""; how = "timeout"
    try:
        while True:
            r = s.recv(65536)
            if not r: how = "closed"; break
            buf += r
    except socket.timeout: pass
    except ConnectionResetError: how = "reset"
    while len(buf) >= 16:
        m, e, c = struct.unpack(">IIQ", buf[:16]); buf = buf[16:]
        got.append((c, e))
    return sorted(got), how
EOF
start_nbdd nbdd-wait.log --socket-threads 1 --max-client-buffer 4M --max-buffer-total 4M
PYTHONPATH=$SUPPORT:$DIR $T python3 - "$SOCK" "$npid" > "$DIR/wait.out" 2>&1 <<'EOF' ||
import os, signal, sys, time
from nbd_raw_client import WRITE, connect, handshake, request
from replies import replies
sock, npid = sys.argv[1], int(sys.argv[2])
M = 1 << 20
a = connect(sock); handshake(a, b"vol")     # fills the 4M total
request(a, WRITE, 1, 0, 2 * M, b"a" * (2 * M))
request(a, WRITE, 2, 8 * M, 2 * M, b"b" * (2 * M))
time.sleep(0.5)
b = connect(sock); handshake(b, b"vol")     # waits for the total
request(b, WRITE, 3, 16 * M, 64 << 10, b"c" * (64 << 10))
time.sleep(0.5)
os.kill(npid, signal.SIGTERM)
print("A", *replies(a))
print("B", *replies(b))
EOF
	fail "the clients: $(cat "$DIR/wait.out")"
wait_exit "$npid" 200
cat "$DIR/wait.out"
grep -qx "A \[(1, 0), (2, 0)\] closed" "$DIR/wait.out" || fail "A's WRITEs in flight"
grep -qx "B \[(3, $ESHUTDOWN)\] closed" "$DIR/wait.out" ||
	fail "B's WRITE, waiting for --max-buffer-total at the stop, got no NBD_ESHUTDOWN"
[ "$rc" = 0 ] || fail "nbdd exited $rc"
start_nbdd nbdd-limit.log --max-inflight 1
PYTHONPATH=$SUPPORT:$DIR $T python3 - "$SOCK" "$npid" > "$DIR/limit.out" 2>&1 <<'EOF' ||
import os, signal, sys, time
from nbd_raw_client import WRITE, connect, handshake, request
from replies import replies
sock, npid = sys.argv[1], int(sys.argv[2])
c = connect(sock); handshake(c, b"vol")
request(c, WRITE, 1, 0, 2 << 20, b"a" * (2 << 20))
request(c, WRITE, 2, 8 << 20, 4096, b"b" * 4096)   # behind --max-inflight 1
time.sleep(0.5)
os.kill(npid, signal.SIGTERM)
print("C", *replies(c))
EOF
	fail "the client: $(cat "$DIR/limit.out")"
wait_exit "$npid" 200
cat "$DIR/limit.out"
grep -qx "C \[(1, 0), (2, $ESHUTDOWN)\] closed" "$DIR/limit.out" ||
	fail "C's second WRITE, behind --max-inflight 1 at the stop, got no NBD_ESHUTDOWN"
echo "commands waiting at the stop answered NBD_ESHUTDOWN: ok"

echo "--- xseg down of the whole path (nbdd first), 8 WRITEs in flight"
SEG2=$SEG-up RUN=$DIR/run
trap '"$BIN/xseg" down "$DIR/up.path" --run-dir "$RUN" --timeout 30 > /dev/null 2>&1; cleanup' EXIT
cat > "$DIR/up.path" <<EOF
segment $SEG2 ports=16 requests=256 heap=64M
peer filed port=1 dir=$DIR/data-up threads=12 delay-us=$DELAY_US
peer vlmcd port=2 blocker-port=1 volume=vol:64M
peer nbdd port=4 target-port=2 unix=$DIR/up.sock socket-threads=2 log-level=info
EOF
"$BIN/xseg" up "$DIR/up.path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 ||
	fail "xseg up: $(cat "$DIR/up.out")"
rm -f "$DIR/go"
$T $CLIENT write "$DIR/up.sock" --conns $CONNS --writes $WRITES --stride $STRIDE --go "$DIR/go" \
	--out "$DIR/down.json" > "$DIR/client.out" 2>&1 & cpid=$!
SEG=$SEG2 wait_in_flight $((CONNS * WRITES))
$T "$BIN/xseg" down "$DIR/up.path" --run-dir "$RUN" > "$DIR/down.out" 2>&1 & dpid=$!
wait_stop_began run/4-nbdd.log
touch "$DIR/go"
wait "$cpid" || fail "the client failed: $(cat "$DIR/client.out")"
wait "$dpid" || fail "xseg down exited $?: $(cat "$DIR/down.out")"
python3 - "$DIR/down.json" $WRITES $ESHUTDOWN <<'EOF' ||
import json, sys
writes, eshutdown = int(sys.argv[2]), int(sys.argv[3])
bad = 0
for c, r in enumerate(json.load(open(sys.argv[1]))):
    got = sorted(r["replies"].values())
    print("  connection %d: replies %s, then %s" % (c, got, r["ended"]))
    bad += got != sorted([0] * writes + [eshutdown]) or r["ended"] != "closed"
sys.exit(bad)
EOF
	fail "xseg down: nbdd's stop did not answer every WRITE in flight (above)"
echo "xseg down: every WRITE in flight answered, the late ones NBD_ESHUTDOWN: ok"

grep -l Sanitizer "$DIR"/*.log "$RUN"/*.log && fail "a sanitizer reported an error (logs above)"
echo "nbdd's stop answered every command in flight, and gave up at its bound: ok"
