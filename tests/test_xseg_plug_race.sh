#!/usr/bin/env bash
# Two `xseg plug --port 1` at once, via two different live caches: each
# checks that port 1 is not plugged via another live cache, then sets the
# route. Done one after the other, the second is refused; done at once,
# both must not succeed: the route the first set would be overwritten,
# and its cache (and any data written through it meanwhile) silently
# left out of the path.
set -u
SEG_PREFIX=xseg-plug-race
. "$(dirname "$0")/lib.sh"

cached_on() {   # PORT
	"$BIN/cached" --segment "$SEG" --port "$1" --blocker-port 1 --cache-size 16M \
		--object-size 1M --write-policy writeback 2>> "$DIR/cached$1.log" & pids+=($!)
	wait_bound "$1"
}

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 64 --heap 16M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
cached_on 3
cached_on 4

tries=${PLUG_RACE_TRIES:-40}
for i in $(seq "$tries"); do
	"$BIN/xseg" route --segment "$SEG" --port 1 --clear || fail "route --clear"
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 2> "$DIR/p3.err" & a=$!
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 4 2> "$DIR/p4.err" & b=$!
	wait $a; ra=$?
	wait $b; rb=$?
	hop=$(port_info 1 next_hop)
	if [ $ra = 0 ] && [ $rb = 0 ]; then
		left=$([ "$hop" = 3 ] && echo 4 || echo 3)
		fail "try $i: both plugs of port 1 succeeded (via 3 and via 4); port 1 -> $hop, cache $left is out of the path"
	fi
	[ $ra = 0 ] || [ $rb = 0 ] || fail "try $i: neither plug succeeded: $(cat "$DIR/p3.err" "$DIR/p4.err")"
done
echo "ok: $tries pairs of plugs at once, one of each refused"
