#!/usr/bin/env bash
# A write-back cached (no --persist) SIGKILLed right after it answered a
# FLUSH of everything, under bench-xseg --verify full data: the FLUSH wrote
# every dirty byte back, so the blocker has it all and the port must not be
# left marked dirty (fail closed). The mark was cleared only by the
# maintenance tick (every 100 ms): killed within that, the cache left its
# port marked with the figure from before the FLUSH, the restart refused
# ("N dirty bytes never written to port 1") and every read failed EIO
# (found by the nbdd review, 50 ms after the answer). Now the FLUSH's
# answer clears it first. Five rounds: write, FLUSH, SIGKILL at once.
set -u
SEG_PREFIX=cached-flush-kill
. "$(dirname "$0")/lib.sh"

start_cached() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > /dev/null || fail "plug"
}
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M > /dev/null || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
for round in 1 2 3 4 5; do
	start_cached
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern rand \
		--total-size 16M --block-size 64K --iodepth 8 --seed $round --verify full --json \
		> "$DIR/w$round.out" 2>&1 || fail "round $round: $(tail -1 "$DIR/w$round.out")"
	[ "$(peer_stat 3 dirty_bytes)" -ge $((8 << 20)) ] ||
		fail "round $round is not dirty in cached: the test would prove little"
	"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op flush > /dev/null ||
		fail "FLUSH in round $round"
	kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
	left=$(port_info 3 dirty_bytes)
	[ "$left" = 0 ] || fail "round $round: killed after its FLUSH was answered, cached left port 3 marked $left dirty bytes"
	wait_unbound 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
		--total-size 16M --block-size 64K --iodepth 8 --seed $round --verify full --json \
		> "$DIR/r$round.out" 2>&1 || fail "round $round read from filed: $(tail -1 "$DIR/r$round.out")"
done
echo "a FLUSH answered, then cached killed: port left clean, every byte on filed: ok"
