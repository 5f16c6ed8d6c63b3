#!/usr/bin/env bash
# nbdd answers a WRITE only once the path has it. Killed in the middle of
# a load: three NBD clients (three connections, one on each of nbdd's
# three socket threads) write 4K blocks of one volume, 16 in flight each,
# through nbdd -> vlmcd -> cached (write-back: the data is dirty in
# cached's memory, not on filed) -> filed; nbdd is SIGKILLed at a random
# moment with writes unanswered, and restarted on the same port. Three
# rounds: every write acknowledged in a round reads back through the
# restarted nbdd. Then cached stops (SIGTERM writes its dirty data back)
# and the last round reads back through a path without it: vlmcd straight
# on filed.
set -u
SEG_PREFIX=nbdd-killed
. "$(dirname "$0")/lib.sh"

# Every client runs under a limit: a hang fails here, with the peers' logs.
T="timeout 120"
ACKED="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_acked_writes.py"
ROUNDS=3 CLIENTS=3 BLOCKS=16384   # 3 x 64M a round: a second or two
SOCK=$DIR/nbd.sock

start_nbdd() {   # start_nbdd PORT SOCK LOG
	rm -f "$2"
	"$BIN/nbdd" --segment "$SEG" --port "$1" --target-port "${TARGET:-2}" --unix "$2" \
		--socket-threads 3 --log-level info 2> "$DIR/$3" & npid=$!
	pids+=($npid)
	wait_bound "$1"
	for _ in $(seq 200); do [ -S "$2" ] && return 0; sleep 0.05; done
	fail "nbdd made no socket $2"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 256M \
	--write-policy writeback --dirty-high 100 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:192M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
start_nbdd 4 "$SOCK" nbdd0.log

for k in $(seq $ROUNDS); do
	w0=$(peer_stat 3 write_bytes)
	$T $ACKED write "$SOCK" --clients $CLIENTS --blocks "$BLOCKS" --round "$k" \
		--acked "$DIR/acked$k" & wpid=$!
	# Under way, with data at risk: this round's writes in cached (its
	# write_bytes grew: the dirty bytes of the rounds before are already
	# there, and a kill before the clients connected proved nothing),
	# dirty, not yet on filed.
	for _ in $(seq 400); do
		[ "$(peer_stat 3 write_bytes 2>/dev/null || echo 0)" -gt $((w0 + (512 << 10))) ] &&
			[ "$(peer_stat 3 dirty_bytes 2>/dev/null || echo 0)" -gt $((512 << 10)) ] && break
		sleep 0.01
	done
	dirty=$(peer_stat 3 dirty_bytes)
	[ "$dirty" -gt $((512 << 10)) ] || fail "round $k: cached holds only $dirty dirty bytes"
	sleep "0.00$((RANDOM % 10))"   # 0-9 ms: a fast writer may be done within 90
	kill -KILL "$npid"; wait "$npid" 2>/dev/null
	wait "$wpid" || fail "round $k: the writer failed"
	n=$(grep -vc in-flight "$DIR/acked$k")
	inflight=$(sed -n 's/^in-flight //p' "$DIR/acked$k")
	# The kill found writes unanswered (else it proved nothing), and came
	# before the clients were done.
	[ "$inflight" -gt 0 ] && [ "$n" -lt $((CLIENTS * BLOCKS)) ] ||
		fail "round $k: $n writes acknowledged, $inflight unanswered: nbdd was not killed under load"
	echo "round $k: nbdd killed with $inflight writes unanswered, $n acknowledged, $dirty bytes dirty in cached"
	grep -q "connected (socket thread 2)" "$DIR/nbdd$((k - 1)).log" ||
		fail "round $k: nbdd's third socket thread had no client"
	start_nbdd 4 "$SOCK" "nbdd$k.log"
	$T $ACKED verify "$SOCK" --round "$k" --acked "$DIR/acked$k" ||
		fail "round $k: through the restarted nbdd"
done

# cached's stop writes the dirty data back: the last round from filed.
kill -TERM "$npid"; wait "$npid" || fail "nbdd exited $? on SIGTERM"
kill -TERM "$cpid"; wait "$cpid" || fail "cached exited $? on SIGTERM"
"$BIN/vlmcd" --segment "$SEG" --port 5 --blocker-port 1 --volume vol:192M \
	2> "$DIR/vlmcd-filed.log" & pids+=($!)
wait_bound 5
TARGET=5 start_nbdd 6 "$DIR/filed.sock" nbdd-filed.log
$T $ACKED verify "$DIR/filed.sock" --round $ROUNDS --acked "$DIR/acked$ROUNDS" ||
	fail "the last round, from filed after cached's stop"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "every acknowledged NBD write survived $ROUNDS SIGKILLs of nbdd: ok"
