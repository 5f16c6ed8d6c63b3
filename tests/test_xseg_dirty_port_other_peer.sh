#!/usr/bin/env bash
# Fail closed must hold whoever binds the port next: a write-back cache
# killed holding dirty data leaves its port marked, and routing ends there
# (requests for the blocker fail EIO) until that cache comes back on its
# persist file or the data is given up (unplug --force). Only cached
# checked the mark when it bound: any other peer started on the port (here
# a nulld) was routed the blocker's requests and answered them, reads with
# data that was never written there and writes that were never stored,
# while the port still said dirty. A peer that does not keep a dirty mark
# of its own must refuse a port marked dirty.
set -u
SEG_PREFIX=xseg-dirty-other
. "$(dirname "$0")/lib.sh"

VOL=4M
bench() {   # OP SEED OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size $VOL --block-size 64K --iodepth 4 --seed "$2" \
		--verify full --timeout 10 --json > "$3" 2> "$3.err"
}

. "$(dirname "$0")/path_lib.sh"
path_start 512 64M "$VOL" --object-size 1M
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M --object-size 1M \
	--write-policy writeback --dirty-high 100 --dirty-low 100 2> "$DIR/cached.log" & cached=$!
pids+=($cached)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
bench write 1 "$DIR/w1.out" || fail "write through the cache: $(tail -2 "$DIR/w1.out.err")"
kill -KILL $cached; wait $cached 2>/dev/null
for _ in $(seq 50); do [ "$(port_info 3 owner)" = 0 ] && break; sleep 0.1; done   # reaped
dirty=$(port_info 3 dirty_bytes)
[ "$dirty" -gt 0 ] || fail "the killed cache left no dirty mark: proves nothing"
echo "port 3 left with $dirty dirty bytes"

echo "--- a nulld started on the marked port"
"$BIN/nulld" --segment "$SEG" --port 3 2> "$DIR/nulld.log" & nulld=$!
pids+=($nulld)
for _ in $(seq 40); do kill -0 $nulld 2>/dev/null || break; sleep 0.05; done
bench read 1 "$DIR/r1.out"
read_ok=$(( $(json "$DIR/r1.out" requests) - $(json "$DIR/r1.out" failed) ))
kill -0 $nulld 2>/dev/null &&
	fail "nulld serves port 3, marked with $dirty dirty bytes: $read_ok of 64 reads of the cache's data were answered by it ($(json "$DIR/r1.out" corrupted) wrong)"
wait $nulld; rc=$?
[ $rc = 1 ] || fail "nulld exited $rc on a port marked dirty, not 1"
grep -q "dirty" "$DIR/nulld.log" || fail "nulld did not say why it refused: $(cat "$DIR/nulld.log")"
[ "$read_ok" = 0 ] || fail "$read_ok reads answered past a port marked dirty"
[ "$(port_info 3 dirty_bytes)" = "$dirty" ] || fail "the mark changed: $(port_info 3 dirty_bytes)"
echo "--- the cache's data given up: the path serves the blocker again"
"$BIN/xseg" unplug --segment "$SEG" --force --via 3 > /dev/null || fail "unplug --force"
"$BIN/nulld" --segment "$SEG" --port 3 2>> "$DIR/nulld.log" & pids+=($!)
wait_bound 3
echo ok
