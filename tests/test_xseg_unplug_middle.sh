#!/usr/bin/env bash
# A chain of write-back caches 1 <- 3 <- 4 (plug --port 1 --via 3, plug
# --port 3 --via 4): 4 is the front, where the path's writes land dirty.
# `xseg unplug --via 3` takes the middle cache out; the cache in front of
# it must stay in the path (1 <- 4), or reads of what 4 holds dirty go
# straight to the blocker's older data. The same for a middle cache
# stopped with SIGTERM (cached restores its blocker's route itself).
set -u
SEG_PREFIX=xseg-unplug-mid
. "$(dirname "$0")/lib.sh"

VOL=16M
. "$(dirname "$0")/path_lib.sh"
bench() { chain_bench "$@"; }
cached_on() { chain_cache "$1" --stop-timeout 2; }   # a middle cache's stop waits --stop-timeout for the front one
path_start 512 64M "$VOL" --object-size 1M

bench write 1 "$DIR/w0.out" || fail "old data: $(tail -2 "$DIR/w0.out.err")"
cached_on 3
cached_on 4
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
"$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 3 via 4"
bench write 2 "$DIR/w1.out" || fail "new data through the chain: $(tail -2 "$DIR/w1.out.err")"
[ "$(peer_stat 4 dirty_bytes)" -gt 0 ] || fail "nothing dirty in cache 4: proves nothing"
echo "cache 4 (front) holds $(peer_stat 4 dirty_bytes) dirty bytes"

echo "--- unplug the middle cache (3)"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug --via 3"
echo "port 1 next_hop $(port_info 1 next_hop), port 3 next_hop $(port_info 3 next_hop)"
bench read 2 "$DIR/r1.out"
c=$(json "$DIR/r1.out" corrupted)
[ "$c" = 0 ] ||
	fail "after unplug --via 3, $c reads returned the blocker's older data: cache 4 (in front of 3) left the path"
[ "$(port_info 1 next_hop)" = 4 ] || fail "port 1 routes to $(port_info 1 next_hop), not to 4"
[ "$(port_info 3 next_hop)" = None ] || fail "port 3 still routes to $(port_info 3 next_hop)"

echo "--- 1 <- 4 <- 3, 3 the front again; SIGTERM to the middle cache (4)"
"$BIN/xseg" plug --segment "$SEG" --port 4 --via 3 || fail "plug 4 via 3"
bench write 3 "$DIR/w2.out" || fail "new data through the chain: $(tail -2 "$DIR/w2.out.err")"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "nothing dirty in cache 3: proves nothing"
echo "cache 3 (front) holds $(peer_stat 3 dirty_bytes) dirty bytes"
kill -TERM "${pids[3]}"; wait "${pids[3]}" || fail "cached 4 exit status"
echo "port 1 next_hop $(port_info 1 next_hop), port 4 next_hop $(port_info 4 next_hop)"
bench read 3 "$DIR/r2.out"
c=$(json "$DIR/r2.out" corrupted)
[ "$c" = 0 ] ||
	fail "after SIGTERM to cache 4, $c reads returned the blocker's older data: cache 3 (in front of 4) left the path"
echo "ok"
