#!/usr/bin/env bash
# Lanes (issue 24): cached --port 3 --lanes 4 (ports 3-6), write-back with
# a persist file and nothing written back on its own, plugged in front of
# filed. Four verified writers at once, each from a port of its own, so
# each queues on a lane of its own (every lane is checked to have taken
# requests). Two faults under their load, each with dirty data at risk:
#   1. SIGKILL of cached; a restart with its lanes on the persist file
#      takes all four lanes over; every acknowledged write reads back
#      through the path (from all four lanes again);
#   2. SIGTERM of cached (the stop: write back, unplug, queued requests
#      passed on) while the writers go on; every acknowledged write of
#      both phases reads back from filed alone.
set -u
SEG_PREFIX=cached-lanes
. "$(dirname "$0")/lib.sh"

WS=4M
bench() {   # bench OP SEED FROM OUT: seed's objects, from port FROM to port 1
	local op=$1 seed=$2 from=$3 out=$4; shift 4
	"$BIN/bench-xseg" --segment "$SEG" --port "$from" --target-port 1 --op "$op" --pattern rand \
		--total-size $WS --block-size 4K --object-size 1M --iodepth 8 --seed "$seed" \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
# writer SEED FROM: write passes until $DIR/stop exists or a pass fails;
# the last pass's JSON in $DIR/wSEED.out, the status and passes in .rc.
writer() {
	local k=$1 n=0 rc=0
	while [ ! -e "$DIR/stop" ] && [ $n -lt 500 ]; do
		n=$((n + 1))
		bench write "$k" "$2" "$DIR/w$k.out" --unacked "$DIR/u$k"; rc=$?
		[ $rc = 0 ] && [ "$(json "$DIR/w$k.out" failed 2>/dev/null)" = 0 ] || break
	done
	echo "$rc $n" > "$DIR/w$k.rc"
}
declare -A failed passes
writers() {   # writers SEED...: one writer per seed, from port 9 + seed % 4 + 1
	rm -f "$DIR/stop"; wpids=()
	for k in "$@"; do writer "$k" $((10 + k % 4)) & wpids+=($!); done
}
end_writers() {   # end_writers SEED...: stop them, record what failed
	touch "$DIR/stop"
	for p in "${wpids[@]}"; do wait "$p"; done
	for k in "$@"; do
		read -r rc n < "$DIR/w$k.rc"
		[ "$rc" -ne 3 ] || fail "seed $k: bench-xseg hung"
		passes[$k]=$n
		failed[$k]=$(json "$DIR/w$k.out" failed) || fail "seed $k: no result from bench-xseg"
		echo "seed $k: $n passes, the last $(json "$DIR/w$k.out" requests) writes answered, ${failed[$k]} failed"
	done
}
read_back() {   # read_back WHERE SEED...: every acknowledged write reads back
	local where=$1; shift
	for k in "$@"; do
		# A failed write of the same data as the pass before leaves the
		# old bytes or the new: only a first pass may differ, and only
		# where no reply acknowledged its writes (--unacked).
		local forgive=()
		[ "${passes[$k]}" = 1 ] && forgive=(--may-differ "$DIR/u$k")
		bench read "$k" $((10 + k % 4)) "$DIR/r$k.out" "${forgive[@]}" ||
			[ "$(json "$DIR/r$k.out" failed 2>/dev/null)" = 0 ] ||
			fail "$where: reading seed $k back failed: $(tail -3 "$DIR/r$k.out.err")"
		c=$(json "$DIR/r$k.out" corrupted)
		[ "$c" = 0 ] ||
			fail "$where: $c acknowledged blocks of seed $k differ (${failed[$k]} writes failed, ${passes[$k]} passes): an acknowledged write was lost"
	done
	echo "$where: seeds $* read back"
}
wait_dirty() {
	for _ in $(seq 400); do
		[ "$(peer_stat 3 dirty_bytes 2>/dev/null || echo 0)" -gt 0 ] && return 0
		sleep 0.01
	done
	fail "$1: cached never held dirty data"
}
start_cached() {   # start_cached LOG
	"$BIN/cached" --segment "$SEG" --port 3 --lanes 4 --threads 2 --blocker-port 1 \
		--cache-size 64M --object-size 1M --write-policy writeback --dirty-high 100 \
		--dirty-low 90 --persist "$DIR/cache.pf" 2> "$DIR/$1" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
start_cached cached0.log
for p in 4 5 6; do [ "$(port_info $p owner)" = "$cpid" ] || fail "lane $p is not cached's"; done
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

# 1. SIGKILL with dirty data, restart on the persist file with the lanes.
writers 1 2 3 4
wait_dirty "kill"
for p in 3 4 5 6; do
	for _ in $(seq 200); do [ "$(port_info $p submitted)" -gt 0 ] && break; sleep 0.01; done
	[ "$(port_info $p submitted)" -gt 0 ] || fail "lane $p took no request: the writers were not spread"
done
sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
start_cached cached1.log
end_writers 1 2 3 4
for p in 4 5 6; do [ "$(port_info $p owner)" = "$cpid" ] || fail "the restart did not take lane $p over"; done
grep -q "persist: .*recovered [1-9][0-9]* dirty bytes" "$DIR/cached1.log" ||
	fail "the restarted cached recovered nothing: $(grep persist "$DIR/cached1.log")"
read_back "after the kill, through the restarted cached" 1 2 3 4

# 2. SIGTERM under the writers: the stop writes back and unplugs; the
# writers go on to filed.
writers 5 6 7 8
wait_dirty "stop"
kill -TERM "$cpid"; wait "$cpid"; rc=$?
[ $rc = 0 ] || fail "cached's stop exited $rc"
sleep 0.2   # a pass or so straight to filed
end_writers 5 6 7 8
[ "$(port_info 1 next_hop)" = None ] ||
	fail "port 1 is still routed through the stopped cache"
read_back "filed alone, after the stop" 1 2 3 4 5 6 7 8
echo "every acknowledged write through four lanes survived a SIGKILL and a stop: ok"
