#!/usr/bin/env bash
# xseg plug --port B --via D while B already routes to a live write-back
# cache C holding dirty data: the route B -> C is overwritten (B -> D), so
# C leaves the path with acknowledged data its blocker lacks. Reads of
# that data through the path must not return the blocker's older bytes
# (fail closed: "a cache never lets the path serve older data"): the plug
# must be refused, or D must be put in front of C, not in its place.
set -u
SEG_PREFIX=xseg-plug-dirty
. "$(dirname "$0")/lib.sh"

VOL=16M
. "$(dirname "$0")/path_lib.sh"
bench() { chain_bench "$@"; }
cached_on() { chain_cache "$1"; }
path_start 512 64M "$VOL" --object-size 1M

bench write 1 "$DIR/w0.out" || fail "old data: $(tail -2 "$DIR/w0.out.err")"
cached_on 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 3"
bench write 2 "$DIR/w1.out" || fail "new data through cached 3: $(tail -2 "$DIR/w1.out.err")"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "nothing dirty in cache 3: proves nothing"
echo "cache 3 holds $(peer_stat 3 dirty_bytes) dirty bytes"

echo "--- a second cache plugged in front of port 1"
cached_on 4
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 4; rc=$?
echo "plug --via 4 exit $rc; port 1 next_hop $(port_info 1 next_hop), port 3 next_hop $(port_info 3 next_hop)"
bench read 2 "$DIR/r1.out"
c=$(json "$DIR/r1.out" corrupted)
[ "$c" = 0 ] ||
	fail "after plug --via 4 (exit $rc), $c reads returned the blocker's older data: cache 3's dirty data left the path"
echo "ok"
