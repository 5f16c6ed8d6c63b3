#!/usr/bin/env bash
# Two operators at once: `xseg unplug --via C` while another turns write-back
# on again (`xseg policy --port C --set writeback`). The unplug switches to
# write-through, writes back what was dirty when it listed, and answers;
# xseg then clears the route. A `policy writeback` taken meanwhile made the
# writes after it dirty in the cache, the unplug answered anyway, and with
# the route gone reads reached filed's older data. The unplug must not
# answer "done" with write-back on again (it fails, routes left), and once
# unplugged the cache takes write-back again only from a plug.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-unplug-policy
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 --delay-us 4000 \
	2> "$DIR/filed.log" & fpid=$!; pids+=($fpid)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 512M \
	--write-policy writeback --dirty-high 95 --dirty-low 90 --log-level info \
	2> "$DIR/cached.log" & cpid=$!; pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

bench() {   # bench OP PREFIX SIZE OUT [more]: through port 1's route
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 \
		--op "$1" --prefix "$2" --pattern seq --total-size "$3" --block-size 64K \
		--iodepth 8 --seed 7 --timeout 30 --json "${@:5}" > "$4" 2> "$4.err"
}
# dirty data for the unplug to write back (filed slowed: it takes a while)
bench write early 48M "$DIR/early.out" --verify none || fail "early writes"
"$BIN/xseg" unplug --segment "$SEG" --via 3 2> "$DIR/unplug.err" & upid=$!
for _ in $(seq 500); do
	grep -q "control: unplug" "$DIR/cached.log" && break
	sleep 0.01
done
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback 2> "$DIR/policy.err"
prc=$?
bench write late 8M "$DIR/w.out" --verify full --unacked "$DIR/unacked"
wait "$upid"; urc=$?
echo "unplug exit $urc $(cat "$DIR/unplug.err"); policy writeback exit $prc $(cat "$DIR/policy.err")"
echo "route of port 1: $(port_info 1 next_hop)"
bench read late 8M "$DIR/r.out" --verify full --may-differ "$DIR/unacked" || true
echo "read back through port 1: corrupted $(json "$DIR/r.out" corrupted), failed $(json "$DIR/r.out" failed)"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ] ||
	fail "acknowledged writes hidden after the unplug (unplug exit $urc, policy writeback exit $prc)"
# once unplugged (the route may be gone), write-back waits for a plug
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug alone"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback 2>/dev/null &&
	fail "an unplugged cache took 'policy writeback'"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug again"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback || fail "policy writeback once plugged"
echo "PASS"
