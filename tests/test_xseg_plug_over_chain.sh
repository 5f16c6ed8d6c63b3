#!/usr/bin/env bash
# A chain 1 <- 3 <- 4 of write-back caches whose middle cache (3) was
# killed clean: the path still runs through 4, the front, which holds the
# newest writes dirty (a dead clean hop is skipped). `xseg plug --port 1
# --via 5` over the dead 3 must not take 4 out of the path with them: it
# must be refused (plug in front of 4 instead), or reads of 4's dirty data
# go to the blocker's older bytes.
set -u
SEG_PREFIX=xseg-plug-chain
. "$(dirname "$0")/lib.sh"

VOL=16M
. "$(dirname "$0")/path_lib.sh"
bench() { chain_bench "$@"; }
cached_on() { chain_cache "$1"; }
path_start 512 64M "$VOL" --object-size 1M

bench write 1 "$DIR/w0.out" || fail "old data: $(tail -2 "$DIR/w0.out.err")"
cached_on 3; pid3=${pids[-1]}
cached_on 4
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
"$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 3 via 4"
bench write 2 "$DIR/w1.out" || fail "new data through the chain: $(tail -2 "$DIR/w1.out.err")"
[ "$(peer_stat 4 dirty_bytes)" -gt 0 ] || fail "nothing dirty in cache 4: proves nothing"
[ "$(port_info 3 dirty_bytes)" = 0 ] || fail "cache 3 is dirty: not the case under test"
kill -KILL "$pid3"; wait "$pid3" 2>/dev/null
echo "cache 3 killed clean; cache 4 (front) holds $(peer_stat 4 dirty_bytes) dirty bytes"

echo "--- plug a new cache (5) in front of port 1, over the dead 3"
cached_on 5
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 5; rc=$?
echo "plug --via 5 exit $rc; port 1 next_hop $(port_info 1 next_hop)"
bench read 2 "$DIR/r1.out"
c=$(json "$DIR/r1.out" corrupted)
[ "$c" = 0 ] ||
	fail "after plug --via 5 (exit $rc), $c reads returned the blocker's older data: cache 4 left the path"
echo "ok"
