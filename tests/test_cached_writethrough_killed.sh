#!/usr/bin/env bash
# A write-through cache holds no acknowledged data its blocker lacks: killed
# once its writes are answered, it must leave its port clean, so that the
# path routes past it (docs/architecture.md, "Fail closed": a cache that
# never published is bypassed when it dies). Every write marked the port
# dirty (1 byte: "not known yet") and only the maintenance tick, every
# 100 ms, cleared it: a write-through cache SIGKILLed within 100 ms of its
# last write left the mark, and every request for the blocker failed EIO
# until an operator gave up data that never existed (unplug --force).
set -u
SEG_PREFIX=cached-wt-killed
. "$(dirname "$0")/lib.sh"

VOL=4M
bench() {   # OP SEED OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size $VOL --block-size 64K --iodepth 4 --seed "$2" \
		--verify full --timeout 30 --json > "$3" 2> "$3.err"
}

. "$(dirname "$0")/path_lib.sh"
path_start 512 64M "$VOL" --object-size 1M
for i in 1 2 3 4 5; do
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M --object-size 1M \
		--write-policy writethrough 2>> "$DIR/cached.log" & cached=$!
	pids+=($cached)
	wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > /dev/null || fail "plug 1 via 3 (round $i)"
	bench write $i "$DIR/w$i.out" || fail "write through the cache: $(tail -2 "$DIR/w$i.out.err")"
	kill -KILL $cached; wait $cached 2>/dev/null
	dirty=$(port_info 3 dirty_bytes)
	wait_unbound 3   # reaped: routing goes past it (before, a read queued there failed)
	bench read $i "$DIR/r$i.out"
	bad=$(( $(json "$DIR/r$i.out" failed) + $(json "$DIR/r$i.out" corrupted) ))
	[ "$bad" = 0 ] || fail "round $i: write-through cache killed after its writes were answered: port 3 says $dirty dirty bytes, $bad of 64 reads failed or were wrong ($(head -1 "$DIR/r$i.out.err"))"
	[ "$dirty" = 0 ] || fail "round $i: port 3 says $dirty dirty bytes"
done
echo ok
