#!/usr/bin/env bash
# Control commands in a chain of caches 1 -> 3 -> 4 (docs/architecture.md:
# "B -> C -> D"), built with `xseg plug --port 1 --via 3` and `xseg plug
# --port 3 --via 4`. `xseg policy --port 3 --set writethrough` must change
# the policy of the cache serving port 3, not of cache 4 that is plugged in
# front of it (the runtime passes only "stats" on to the addressed port;
# every other X_CONTROL addressed to port 3 is resolved along port 3's
# route and lands on port 4). `xseg unplug --via 3` sends "unplug" the same
# wrong way. Then cache 3 is killed (clean): a command for port 3 fails
# instead of running on cache 4, and `xseg unplug --via 3` just clears the
# dead port's routes (found by review: it unplugged cache 4).
set -u
SEG_PREFIX=xseg-chain-ctl
. "$(dirname "$0")/lib.sh"

cached_on() {   # PORT: its pid in cpid_PORT
	"$BIN/cached" --segment "$SEG" --port "$1" --blocker-port 1 --cache-size 16M \
		--object-size 1M --write-policy writeback \
		2>> "$DIR/cached$1.log" & pids+=($!)
	eval "cpid_$1=$!"
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

# Cache 3 (write-through now: clean) killed: a command for port 3 reached
# cache 4 in front of it, and when the forward to the dead port failed,
# cache 4 ran it itself (`xseg unplug --via 3` unplugged cache 4).
kill -KILL "$cpid_3"; wait "$cpid_3" 2>/dev/null
expect_exit 1 "$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough
[ "$(peer_stat 4 policy)" = writeback ] || fail "a policy for the dead port 3 changed cache 4's"
expect_exit 0 "$BIN/xseg" unplug --segment "$SEG" --via 3
grep -q "port 3: nobody serves it" "$DIR/out" || fail "unplug of the dead clean port 3 said: $(cat "$DIR/out")"
[ "$(peer_stat 4 policy)" = writeback ] || fail "unplug --via 3 (dead) unplugged cache 4"
grep -q "control: unplug" "$DIR/cached4.log" && fail "cache 4 ran the unplug meant for port 3"
[ "$(port_info 1 next_hop)" = 4 ] || fail "port 1 routed to $(port_info 1 next_hop), not spliced to 4"
echo "ok"
