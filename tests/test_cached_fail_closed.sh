#!/usr/bin/env bash
# Fail closed (issue 22): a write-back cache that dies holding dirty data
# never lets the path serve older data. bench-xseg -> vlmcd -> cached
# (write-back, plugged in front of filed): with acknowledged data dirty in
# the cache, cached is SIGKILLed; reads through the path then fail (none
# returns older bytes), `route --clear` and `unplug` refuse to bypass it, a
# cached without its data cannot take the port over, and `unplug --force`
# gives the data up saying how much. A stop that gives up (filed frozen,
# --stop-timeout) leaves the port failing closed too. A persist file whose
# data was given up is refused (newer data went to filed since), and
# --persist-discard starts it afresh. A write-through cache
# that dies is bypassed at once, as before.
set -u
SEG_PREFIX=cached-closed
. "$(dirname "$0")/lib.sh"

VOL=16M
bench() {   # OP SEED OUT [extra...]
	local op=$1 seed=$2 out=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$op" \
		--pattern seq --total-size $VOL --block-size 64K --iodepth 8 --seed "$seed" \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
start_cached() {   # policy log [extra...]
	local policy=$1 log=$2; shift 2
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
		--object-size 1M --write-policy "$policy" --dirty-high 100 --dirty-low 100 \
		"$@" 2>> "$DIR/$log" & cpid=$!
	pids+=($cpid)
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:$VOL --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2

echo "--- old data on filed, then newer data dirty in a write-back cache"
bench write 1 "$DIR/w0.out" || fail "writing the old data: $(tail -2 "$DIR/w0.out.err")"
start_cached writeback cached.log
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
bench write 2 "$DIR/w1.out" || fail "writes through cached: $(tail -2 "$DIR/w1.out.err")"
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "nothing dirty in the cache: the test would prove nothing"
[ "$(port_info 3 dirty_bytes)" -gt 0 ] || fail "cached did not publish its dirty data on its port"
echo "cached holds $d dirty bytes"

echo "--- cached SIGKILLed: the path fails, never serves the old data"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
bench read 2 "$DIR/r1.out"
[ "$(json "$DIR/r1.out" corrupted)" = 0 ] ||
	fail "reads returned older data after the cache died: $(json "$DIR/r1.out" corrupted) blocks"
[ "$(json "$DIR/r1.out" failed)" = "$(json "$DIR/r1.out" requests)" ] ||
	fail "some reads went around the dead cache"
grep -q "unplug --force" "$DIR/r1.out.err" "$DIR/vlmcd.log" ||
	echo "(the client's error does not name the way out; vlmcd's log may)"
expect_exit 1 "$BIN/xseg" route --segment "$SEG" --port 1 --clear
grep -q "unplug --force --via 3" "$DIR/err" || fail "route --clear: $(cat "$DIR/err")"
expect_exit 1 "$BIN/xseg" unplug --segment "$SEG" --via 3
grep -q "dirty bytes" "$DIR/err" || fail "unplug: $(cat "$DIR/err")"

echo "--- a cached without the data cannot take the port over"
expect_exit 1 timeout 20 "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 \
	--cache-size 64M --object-size 1M
grep -q "dirty" "$DIR/err" || fail "a new cached on the port: $(cat "$DIR/err")"
bench read 2 "$DIR/r2.out"
[ "$(json "$DIR/r2.out" corrupted)" = 0 ] || fail "old data served after the refused start"

echo "--- unplug --force gives the data up, saying how much"
expect_exit 0 "$BIN/xseg" unplug --segment "$SEG" --via 3 --force
grep -q "gave up [1-9][0-9]* dirty bytes" "$DIR/err" || fail "unplug --force: $(cat "$DIR/err")"
[ "$(port_info 3 dirty_bytes)" = 0 ] || fail "the dead cache's port still says dirty"
bench read 1 "$DIR/r3.out" || fail "the path without the cache: $(tail -2 "$DIR/r3.out.err")"
echo "filed serves its (older) data again after the operator gave the rest up"

echo "--- a stop that gives up keeps the path failing closed"
start_cached writeback cached2.log --stop-timeout 2
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug again"
bench write 3 "$DIR/w2.out" || fail "writes through the second cached"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "nothing dirty before the stop"
kill -STOP "$fpid"
kill -TERM "$cpid"
for _ in $(seq 200); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$cpid" 2>/dev/null && fail "cached did not give up within 20 s (--stop-timeout 2)"
wait "$cpid"; rc=$?
kill -CONT "$fpid"
[ $rc -ne 0 ] || fail "cached exited 0 without writing its data back"
[ "$(port_info 3 dirty_bytes)" -gt 0 ] || fail "cached gave up but left its port saying clean"
bench read 3 "$DIR/r4.out"
[ "$(json "$DIR/r4.out" corrupted)" = 0 ] || fail "older data served after the stop gave up"
[ "$(json "$DIR/r4.out" failed)" -gt 0 ] || fail "reads went around the cache that gave up"
expect_exit 0 "$BIN/xseg" unplug --segment "$SEG" --via 3 --force

echo "--- a persist file whose data was given up is not replayed over newer data"
start_cached writeback cached4.log --persist "$DIR/gu.pf"
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug the persist cache"
bench write 5 "$DIR/w5.out" || fail "writes through the persist cache"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "nothing dirty in the persist cache: the test would prove nothing"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
held=$("$BIN/cached" --persist-inspect "$DIR/gu.pf" --json |
	python3 -c "import json,sys; print(json.load(sys.stdin)['dirty_bytes'])")
[ "$held" -gt 0 ] || fail "the persist file holds no dirty data"
expect_exit 0 "$BIN/xseg" unplug --segment "$SEG" --via 3 --force
[ "$(port_info 3 given_up_bytes)" -gt 0 ] || fail "the port does not count what was given up"
bench write 6 "$DIR/w6.out" || fail "newer writes straight to filed"
expect_exit 1 timeout 20 "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 \
	--cache-size 64M --object-size 1M --dirty-high 100 --dirty-low 100 --persist "$DIR/gu.pf"
head -1 "$DIR/err" | grep -q "gave up on port 3.*--persist-discard" ||
	fail "a restart on the given-up file: $(cat "$DIR/err")"
[ "$("$BIN/cached" --persist-inspect "$DIR/gu.pf" --json |
	python3 -c "import json,sys; print(json.load(sys.stdin)['dirty_bytes'])")" = "$held" ] ||
	fail "the refused start changed the persist file"
start_cached writeback cached5.log --persist "$DIR/gu.pf" --persist-discard
wait_bound 3
for _ in $(seq 100); do grep -q "dirty bytes dropped" "$DIR/cached5.log" && break; sleep 0.05; done
grep -q "$held dirty bytes dropped" "$DIR/cached5.log" ||
	fail "--persist-discard did not say it dropped $held bytes: $(grep persist "$DIR/cached5.log")"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug the fresh persist cache"
bench read 6 "$DIR/r6.out" || fail "reading the newer data: $(tail -2 "$DIR/r6.out.err")"
[ "$(json "$DIR/r6.out" corrupted)" = 0 ] || fail "given-up data was replayed over newer data"
kill -TERM "$cpid"; wait "$cpid" || fail "the fresh persist cache exited $? on SIGTERM"
echo "refused with $held given-up bytes in the file; newer data intact"

echo "--- a write-through cache that dies is bypassed at once"
start_cached writethrough cached3.log
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug a write-through cache"
bench write 4 "$DIR/w3.out" || fail "writes through the write-through cache"
# marked while its writes were under way, clear within 100 ms after
for _ in $(seq 50); do [ "$(port_info 3 dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(port_info 3 dirty_bytes)" = 0 ] || fail "an idle write-through cache still says dirty"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
for _ in $(seq 50); do
	[ "$(port_info 3 owner)" = 0 ] && break   # reaped by a peer that wrote to it
	bench read 4 "$DIR/r5.out" >/dev/null 2>&1
	sleep 0.1
done
bench read 4 "$DIR/r5.out" || fail "reads around a dead clean cache: $(tail -2 "$DIR/r5.out.err")"
echo "cached fails closed: ok"
