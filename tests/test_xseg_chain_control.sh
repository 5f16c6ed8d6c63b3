#!/usr/bin/env bash
# Control commands in a chain of caches 1 -> 3 -> 4 (docs/architecture.md:
# "B -> C -> D"), built with `xseg plug --port 1 --via 3` and `xseg plug
# --port 3 --via 4`. `xseg policy --port 3 --set writethrough` must change
# the policy of the cache serving port 3, not of cache 4 that is plugged in
# front of it (the runtime passes only "stats" on to the addressed port;
# every other X_CONTROL addressed to port 3 is resolved along port 3's
# route and lands on port 4). `xseg unplug --via 3` sends "unplug" the same
# wrong way.
set -u
SEG_PREFIX=xseg-chain-ctl
. "$(dirname "$0")/lib.sh"

cached_on() {   # PORT
	"$BIN/cached" --segment "$SEG" --port "$1" --blocker-port 1 --cache-size 16M \
		--object-size 1M --write-policy writeback \
		2>> "$DIR/cached$1.log" & pids+=($!)
	wait_bound "$1"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
cached_on 3
cached_on 4
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
"$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 3 via 4"
[ "$(peer_stat 3 port)" = 3 ] && [ "$(peer_stat 4 port)" = 4 ] || fail "stats do not name the ports"

expect_exit 0 "$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough
p3=$(peer_stat 3 policy) p4=$(peer_stat 4 policy)
echo "after policy --port 3 --set writethrough: port 3 $p3, port 4 $p4"
grep -h "control:" "$DIR"/cached*.log | sed 's/^/  log: /'
[ "$p4" = writeback ] || fail "policy --port 3 changed the policy of port 4 (the cache in front of 3)"
[ "$p3" = writethrough ] || fail "policy --port 3 did not reach port 3 (still $p3)"
echo "ok"
