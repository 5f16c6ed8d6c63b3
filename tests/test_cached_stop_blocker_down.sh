#!/usr/bin/env bash
# A clean cache whose blocker is down stops at once on SIGTERM: it must
# still take itself out of the route it was plugged into, as any other
# stop does. It left `1 -> 3` behind: once port 3 was free, the next peer
# to bind it (here a nulld, unrelated to the path) got every request for
# the restarted blocker, and answered the path's writes without storing
# them (acknowledged writes lost; reads served by the wrong peer).
set -u
SEG_PREFIX=cached-stop-bdown
. "$(dirname "$0")/lib.sh"

VOL=8M
bench() {   # OP SEED OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size $VOL --block-size 64K --iodepth 8 --seed "$2" \
		--verify full --timeout 30 --json > "$3" 2> "$3.err"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & filed=$!
pids+=($filed)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:$VOL --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M --object-size 1M \
	--write-policy writethrough --log-level info 2> "$DIR/cached.log" & cached=$!
pids+=($cached)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
bench write 1 "$DIR/w1.out" || fail "write through the cache: $(tail -2 "$DIR/w1.out.err")"

echo "--- the blocker dies, then the clean cache is stopped"
kill -KILL $filed; wait $filed 2>/dev/null
kill -TERM $cached; wait $cached || fail "cached exited $? on SIGTERM"
grep -q "stopping at once" "$DIR/cached.log" || fail "cached did not take the blocker-down stop"
hop=$(port_info 1 next_hop)
echo "port 1 next_hop after the cache's stop: $hop"

echo "--- the blocker back; an unrelated peer binds the cache's old port"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2>> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/nulld" --segment "$SEG" --port 3 2> "$DIR/nulld.log" & nulld=$!
pids+=($nulld)
wait_bound 3
bench write 2 "$DIR/w2.out" || fail "write with the blocker back: $(tail -2 "$DIR/w2.out.err")"
served=$(peer_stat 3 requests 2>/dev/null || echo "?")
kill -TERM $nulld; wait $nulld
bench read 2 "$DIR/r2.out"
c=$(( $(json "$DIR/r2.out" corrupted) + $(json "$DIR/r2.out" failed) ))
[ "$c" = 0 ] || fail "$c of the acknowledged writes are not on the blocker: the stale route 1 -> 3 sent them to the nulld on port 3 (it served $served requests)"
[ "$hop" = None ] || fail "port 1 still routes to $hop after the cache on it stopped"
echo ok
