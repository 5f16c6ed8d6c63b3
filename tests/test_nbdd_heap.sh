#!/usr/bin/env bash
# nbdd's client buffers are also its chunks in the segment's heap, each a
# power-of-two block (a 1M chunk takes 2M). By default they hold at most a
# quarter of the heap's bytes, so that a target that stops answering under
# large writes leaves the rest of the segment buffers: with filed
# SIGSTOPped under 1M NBD writes from three clients, nbdd's share of the
# heap stops growing at half of it and another client of the segment still
# gets an 8M buffer (nbdd's old default, 256M in all, took the whole 32M
# heap). After SIGCONT every acknowledged write reads back through nbdd.
# A --max-buffer-total above the share is kept, with a warning naming it.
set -u
SEG_PREFIX=nbdd-heap
. "$(dirname "$0")/lib.sh"
ACKED="timeout 120 python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_acked_writes.py"

. "$(dirname "$0")/path_lib.sh"
path_start 1024 32M 64M
"$BIN/nulld" --segment "$SEG" --port 5 2> "$DIR/nulld.log" & pids+=($!)
wait_bound 5

# start_nbdd NAME OPTIONS...: nbdd on port 4 serving $DIR/NAME.sock; pid in $nbdd
start_nbdd() {
	local name=$1; shift
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume vol:64M \
		--unix "$DIR/$name.sock" --log-level info "$@" 2> "$DIR/$name.log" & nbdd=$!
	pids+=($nbdd)
	wait_bound 4
	for _ in $(seq 100); do [ -S "$DIR/$name.sock" ] && return 0; sleep 0.05; done
	fail "nbdd $name: no socket"
}
heap_used() { "$BIN/xseg" info --segment "$SEG" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['heap_used'])"; }

echo "--- a given --max-buffer-total above the share: kept, with a warning"
start_nbdd big --max-buffer-total 64M
grep -q "client buffers may hold 64M, more than a quarter of the segment's 32M heap" "$DIR/big.log" ||
	{ cat "$DIR/big.log"; fail "no warning for --max-buffer-total 64M on a 32M heap"; }
kill -TERM $nbdd; wait $nbdd || fail "nbdd exited $? on SIGTERM"

echo "--- the defaults on a 32M heap, filed stopped under 1M writes"
start_nbdd share
grep -q "buffers held for clients: at most 8M each, 8M in all (the segment's heap: 32M)" "$DIR/share.log" ||
	{ cat "$DIR/share.log"; fail "the defaults did not follow the heap"; }
kill -STOP $filed
# 3 clients x 8 writes of 1M, 8 in flight each: 24M wanted at once
$ACKED write "$DIR/share.sock" --clients 3 --blocks 8 --block-size 1048576 --depth 8 \
	--round 1 --acked "$DIR/acked" > "$DIR/writer.out" 2>&1 & writer=$!
last=-1 used=0
for _ in $(seq 40); do   # until nbdd's share stops growing
	sleep 0.25
	used=$(heap_used)
	[ "$used" = "$last" ] && [ "$used" -gt 0 ] && break
	last=$used
done
echo "heap used with filed stopped: $((used >> 20))M of 32M"
[ "$used" -ge $((4 << 20)) ] || { cat "$DIR/writer.out"; kill -CONT $filed; fail; }; [ 1 ] || fail "the writes did not reach the path (heap used $used): the test tested nothing"
[ "$used" -le $((18 << 20)) ] || fail "nbdd's chunks took $((used >> 20))M of the 32M heap (at most half, and a chunk)"
"$BIN/xreq" --segment "$SEG" --port 9 --target-port 5 --op write --target other --size 8388608 \
	--data x > "$DIR/xreq.out" 2>&1 || { cat "$DIR/xreq.out"; fail "another client got no 8M buffer while filed was stopped"; }
kill -CONT $filed
wait $writer || { cat "$DIR/writer.out"; fail "the writer"; }
grep -q "^in-flight 0$" "$DIR/acked" || fail "writes left unanswered: $(tail -1 "$DIR/acked")"
[ "$(grep -vc in-flight "$DIR/acked")" = 24 ] || fail "not every write was acknowledged"
$ACKED verify "$DIR/share.sock" --block-size 1048576 --depth 8 --round 1 --acked "$DIR/acked" ||
	fail "an acknowledged write did not read back"
kill -TERM $nbdd; wait $nbdd || fail "nbdd exited $? on SIGTERM"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "nbdd's buffers stay within their share of the heap: ok"
