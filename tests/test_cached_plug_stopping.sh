#!/usr/bin/env bash
# A plug that comes while a write-through cache stops (found by review).
# The stop restores the route and then waits until the cache's own port is
# quiet (up to 2 s while clients address it straight), serving meanwhile:
# a plug taken then was answered, xseg plug moved port 1's route to the
# exiting cache, and after it exited the route stayed (the next peer to
# bind port 3 would get port 1's requests). Now the plug is refused
# (ESHUTDOWN, "is stopping") and the route stays; a route moved to the
# cache during its stop anyway (a plug answered just before it) is put
# back at its exit.
set -u
SEG_PREFIX=cached-plug-stopping
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 128 --heap 32M > /dev/null ||
	fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M \
	--write-policy writethrough --log-level info 2> "$DIR/cached.log" & CACHED=$!
pids+=($CACHED)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "the first plug"
[ "$(port_info 1 next_hop)" = 3 ] || fail "the first plug did not route port 1 to 3"

# A client of port 3 itself keeps it busy: the stop's quiet wait lasts.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op write --pattern rand \
	--total-size 4G --block-size 4K --iodepth 4 --object-size 1M --timeout 20 \
	> "$DIR/bench.out" 2>&1 & BENCH=$!
pids+=($BENCH)
sleep 0.5
kill -TERM "$CACHED"
for _ in $(seq 500); do
	grep -q "routes straight to its blocker again" "$DIR/cached.log" && break
	sleep 0.02
done
grep -q "routes straight to its blocker again" "$DIR/cached.log" ||
	fail "the stop did not restore the route: $(tail -3 "$DIR/cached.log")"
kill -0 "$CACHED" 2> /dev/null || fail "cached exited at once: its port was not kept busy"

"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > "$DIR/plug.out" 2>&1 &
PLUG=$!
for _ in $(seq 100); do kill -0 $PLUG 2> /dev/null || break; sleep 0.05; done
plug_ran=no
kill -0 $PLUG 2> /dev/null && plug_ran=yes
wait "$CACHED" || fail "cached exited non-zero: $(tail -3 "$DIR/cached.log")"
plug_rc=0
wait $PLUG || plug_rc=$?
kill "$BENCH" 2> /dev/null; wait "$BENCH" 2> /dev/null
[ "$(port_info 1 next_hop)" != 3 ] ||
	fail "port 1 routes to the exited cache's port (xseg plug during its stop: exit" \
	     "$plug_rc, $(cat "$DIR/plug.out"))"
[ $plug_rc != 0 ] || fail "xseg plug exited 0 in front of a stopping cache"
# (on a loaded machine the quiet wait may end first: then the plug is
# never taken, and fails when the cache leaves its port)
grep -q "port 3 is stopping: not plugged\|port 3 began to stop during the plug\|port 3 did not take the plug command: Host is down" "$DIR/plug.out" ||
	fail "xseg plug does not say the cache stops: $(cat "$DIR/plug.out")"
[ $plug_ran = no ] || fail "xseg plug still ran 5 s after the plug (exit $plug_rc later)"
echo "a plug during a cache's stop is refused: ok"
