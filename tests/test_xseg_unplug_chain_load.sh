#!/usr/bin/env bash
# Two write-back caches of filed (port 1) plugged into one chain and out
# again, over and over, under verified load: plug 1 via 3, plug 3 via 4
# (1 <- 3 <- 4), unplug --via 3, unplug --via 4. A request cache 4 had lent
# to 3 was forwarded by 3 after its unplug to the front of the new chain
# (1 <- 4): back to cache 4, which waited for its reply, took it as new and
# sent it twice; the failure path then completed it a second time ("engine
# bug: DONE -> DONE", abort, the dirty data of cache 4 lost). Every write
# must be acknowledged and read back, both caches must live, and cache 4
# must have held dirty data at an unplug (else the run proves nothing).
set -u
SEG_PREFIX=xseg-unplug-load
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --delay-us 100 2> "$DIR/filed.log" &
pids+=($!)
wait_bound 1
for p in 3 4; do
	"$BIN/cached" --segment "$SEG" --port "$p" --blocker-port 1 --cache-size 8M \
		--object-size 1M --write-policy writeback --stop-timeout 2 \
		2>> "$DIR/cached$p.log" & pids+=($!)
	wait_bound "$p"
done
cache_pid() { echo "${pids[$(($1 - 2))]}"; }
# bench PORT OP SEED PREFIX [options]: 32M of 4K blocks at port 1, verified.
bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port "$1" --target-port 1 --op "$2" --pattern rand \
		--total-size 32M --block-size 4K --object-size 1M --iodepth 16 --seed "$3" \
		--prefix "$4" --verify full --timeout 30 --json "${@:5}"
}
bench 10 write 1 w > "$DIR/w0.out" 2>&1 || fail "old data: $(tail -2 "$DIR/w0.out")"
bench 10 write 1 r > "$DIR/r0.out" 2>&1 || fail "read set: $(tail -2 "$DIR/r0.out")"

# New data on "w" (seed 2) while "r" is read (misses: what caches lend).
bench 10 write 2 w --runtime 22 > "$DIR/w.out" 2> "$DIR/w.err" & writer=$!
bench 11 read 1 r --runtime 22 > "$DIR/r.out" 2> "$DIR/r.err" & reader=$!
# A command that never returns is a failure (a hang was one way it failed).
xseg() { timeout 60 "$BIN/xseg" "$@" || { [ $? != 124 ] || fail "xseg $1 hung"; false; }; }
end=$((SECONDS + 18)) passes=0 at_risk=0 errors=0
while [ "$SECONDS" -lt "$end" ]; do
	passes=$((passes + 1))
	xseg plug --segment "$SEG" --port 1 --via 3 || errors=$((errors + 1))
	xseg plug --segment "$SEG" --port 3 --via 4 || errors=$((errors + 1))
	sleep 0.2
	xseg unplug --segment "$SEG" --via 3 || errors=$((errors + 1))
	d=$(peer_stat 4 dirty_bytes) && [ "$d" -gt 0 ] && at_risk=$((at_risk + 1))
	xseg unplug --segment "$SEG" --via 4 || errors=$((errors + 1))
	for p in 3 4; do
		kill -0 "$(cache_pid $p)" 2> /dev/null ||
			fail "cached $p died in pass $passes: $(tail -3 "$DIR/cached$p.log")"
	done
done
wait "$writer" || fail "writer exit status: $(tail -2 "$DIR/w.err")"
wait "$reader" || fail "reader exit status: $(tail -2 "$DIR/r.err")"
echo "$passes passes, cache 4 dirty at $at_risk of its unplugs, $errors plug/unplug errors"
! grep -h "sent twice\|engine bug\|not ours" "$DIR"/cached*.log || fail "a cache took its own request back"
[ "$at_risk" -gt 0 ] || fail "cache 4 held nothing dirty at any unplug: proves nothing"
[ "$errors" = 0 ] || fail "$errors plug or unplug commands failed"
for f in w r; do
	[ "$(json "$DIR/$f.out" failed)" = 0 ] && [ "$(json "$DIR/$f.out" corrupted)" = 0 ] ||
		fail "$f: $(tail -1 "$DIR/$f.out")"
done
bench 12 read 2 w > "$DIR/back.out" 2>&1 || fail "read-back: $(tail -1 "$DIR/back.out")"
echo "ok: $(json "$DIR/w.out" requests) writes acknowledged, every byte read back"
