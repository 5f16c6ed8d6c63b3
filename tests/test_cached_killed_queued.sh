#!/usr/bin/env bash
# Requests queued on a clean cache's port when the cache dies were never
# seen by it: once a live peer reaps the port they must go on where the
# route leads (the blocker), as routing sends every later request past the
# dead hop, not fail back EHOSTDOWN (a VM would see I/O errors for a
# write-through cache's crash). A write-through cache is SIGSTOPped (it
# takes nothing), a verified read load queues on its port, the cache is
# SIGKILLed: every read must come back served and right. A write-back
# cache killed holding dirty data still fails them (fail closed).
set -u
SEG_PREFIX=cached-killed-queued
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
bench() {   # OP SEED OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$1" --pattern rand \
		--total-size 2M --block-size 4K --iodepth 16 --seed "$2" --verify full --timeout 30 \
		--json > "$3" 2> "$3.err"
}
cache_on_3() {   # POLICY
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M \
		--write-policy "$1" --dirty-high 100 --dirty-low 100 2>> "$DIR/cached.log" & cached=$!
	pids+=($cached)
	wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > /dev/null || fail "plug 1 via 3"
}

stop_cache() {   # SIGSTOP, and wait until every thread of it is stopped
	kill -STOP $cached
	for _ in $(seq 200); do
		grep -h "^State:" /proc/$cached/task/*/status | grep -qv "(stopped)" || return 0
		sleep 0.01
	done
	fail "cached did not stop"
}

# SEED OUT: a verified read load ($reader) queued on the stopped cache's port
read_into_stopped_cache() {
	bench read "$1" "$2" & reader=$!
	for _ in $(seq 100); do
		[ "$(port_info 3 request_depth)" -ge 16 ] && break
		sleep 0.02
	done
}

echo "--- a write-through cache stopped, requests queued on it, then killed"
cache_on_3 writethrough
bench write 1 "$DIR/w1.out" || fail "write through the cache: $(tail -2 "$DIR/w1.out.err")"
stop_cache
read_into_stopped_cache 1 "$DIR/r1.out"
echo "queued on the stopped cache's port: $(port_info 3 request_depth)"
kill -KILL $cached; wait $cached 2>/dev/null
wait $reader
f=$(json "$DIR/r1.out" failed) c=$(json "$DIR/r1.out" corrupted)
[ "$f" = 0 ] && [ "$c" = 0 ] ||
	fail "reads queued on a dead clean cache: $f failed, $c wrong ($(head -1 "$DIR/r1.out.err"))"
echo "every read queued on the dead clean cache was served by filed"
wait_unbound 3

echo "--- a write-back cache holding dirty data: the same, and the reads must fail"
cache_on_3 writeback
bench write 2 "$DIR/w2.out" || fail "write into the cache: $(tail -2 "$DIR/w2.out.err")"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "nothing dirty: the case shows nothing"
stop_cache
read_into_stopped_cache 2 "$DIR/r2.out"
kill -KILL $cached; wait $cached 2>/dev/null
wait $reader
f=$(json "$DIR/r2.out" failed) c=$(json "$DIR/r2.out" corrupted)
[ "$c" = 0 ] || fail "reads past a dead dirty cache: $c returned the blocker's older data"
[ "$f" -gt 0 ] || fail "no read failed past a dead dirty cache"
echo "past the dead dirty cache: $f reads failed, none returned older data"
echo "PASS"
