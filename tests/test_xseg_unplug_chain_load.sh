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
# The writes go to a vlmcd volume, a new seed each pass, and each pass is
# read back (verified) before the next: dirty data an unplug lost reads
# back as the pass before's. A --runtime writer of one seed over objects
# (as this test had) rewrote every block with the same bytes about 18
# times: unplugs that wrote their dirty data nowhere still passed.
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
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume w:32M --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
# vbench PORT OP SEED: the same on volume w through vlmcd (port 2 -> port 1)
vbench() {
	"$BIN/bench-xseg" --segment "$SEG" --port "$1" --target-port 2 --volume w --op "$2" \
		--pattern rand --total-size 32M --block-size 4K --iodepth 16 --seed "$3" \
		--verify full --timeout 30 --json
}
# writer: seeds 2, 3, ... each written, then read back, until $DIR/stop-w
writer() {
	local k=2
	while :; do
		vbench 10 write $k > "$DIR/w$k.out" 2> "$DIR/w$k.err" || return 1
		echo $k > "$DIR/last"
		vbench 10 read $k > "$DIR/v$k.out" 2> "$DIR/v$k.err" || return 1
		[ -e "$DIR/stop-w" ] && return 0
		k=$((k + 1))
	done
}
vbench 10 write 1 > "$DIR/w0.out" 2>&1 || fail "old data: $(tail -2 "$DIR/w0.out")"
bench 10 write 1 r > "$DIR/r0.out" 2>&1 || fail "read set: $(tail -2 "$DIR/r0.out")"

# New data on "w" (seeds 2, 3, ...) while "r" is read (misses: what caches lend).
writer & writer=$!
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
touch "$DIR/stop-w"
wait "$writer" || { f=$(ls -t "$DIR"/[wv]*.out | head -1)
	fail "writer: $(basename "$f" .out) (w: write, v: its read-back): $(json "$f" corrupted) blocks older, $(json "$f" failed) failed: $(tail -2 "${f%.out}.err")"; }
last=$(cat "$DIR/last" 2> /dev/null) || fail "no write pass ended: $(tail -n 2 "$DIR"/w*.err)"
wait "$reader" || fail "reader exit status: $(tail -2 "$DIR/r.err")"
echo "$passes passes, cache 4 dirty at $at_risk of its unplugs, $errors plug/unplug errors"
! grep -h "sent twice\|engine bug\|not ours" "$DIR"/cached*.log || fail "a cache took its own request back"
[ "$at_risk" -gt 0 ] || fail "cache 4 held nothing dirty at any unplug: proves nothing"
[ "$errors" = 0 ] || fail "$errors plug or unplug commands failed"
writes=0
for f in $(seq -f "w%g" 2 "$last") $(seq -f "v%g" 2 "$last") r; do
	[ "$(json "$DIR/$f.out" failed)" = 0 ] && [ "$(json "$DIR/$f.out" corrupted)" = 0 ] ||
		fail "$f: $(tail -1 "$DIR/$f.out")"
	[ "${f#w}" = "$f" ] || writes=$((writes + $(json "$DIR/$f.out" requests)))
done
vbench 12 read "$last" > "$DIR/back.out" 2>&1 || fail "read-back: $(tail -1 "$DIR/back.out")"
echo "ok: $writes writes in seeds 2..$last acknowledged, each pass read back before the next"
