#!/usr/bin/env bash
# xseg down when the segment's name is gone (xseg destroy, or logind's
# RemoveIPC= wiping /dev/shm) while the path runs: down cannot see the
# ports' dirty marks. A write-back cache that could not write back in its
# --stop-timeout gave up (exit 1, its dirty data not on filed), down
# counted it stopped, stopped filed too and exited 0. Now the cache's exit
# status, from its log, stops down there: exit 1 naming it, filed left
# running. The data was in the cache's persist file: a new up recovers it
# and every byte reads back from filed.
set -u
SEG_PREFIX=xseg-down-noseg
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/up_lib.sh"

# filed takes 1 s a request on one thread: the cache cannot write back
# its 8 objects within its 1 s stop-timeout
cache="port=3 blocker-port=1 cache-size=32M object-size=1M write-policy=writeback dirty-high=100 dirty-low=100 persist=$DIR/c.persist plug=1"
cat > "$DIR/slow.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed  port=1 dir=$DIR/data threads=1 delay-us=1000000
peer vlmcd  port=2 blocker-port=1 volume=vol:8M object-size=1M
peer cached $cache stop-timeout=1
EOT
bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size 8M --block-size 64K --iodepth 8 --seed 8 --verify full \
		--timeout 30 --json > "$DIR/$1.out" 2> "$DIR/$1.err" ||
		fail "$1: $(tail -2 "$DIR/$1.err")"
}
"$BIN/xseg" up "$DIR/slow.path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
bench write
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "nothing dirty in the cache: the test would prove nothing"
echo "cached holds $d dirty bytes; the segment's name removed"
"$BIN/xseg" destroy --segment "$SEG" || fail "destroy"
fpid=$(cat "$RUN/1-filed.pid") vpid=$(cat "$RUN/2-vlmcd.pid")

echo "--- down: the cache gives up its write-back: exit 1, filed left running"
expect_exit 1 timeout 60 "$BIN/xseg" down "$DIR/slow.path" --run-dir "$RUN" --timeout 20
cat "$DIR/out" "$DIR/err"
grep -q "cached on port 3 .*failed its stop" "$DIR/err" ||
	fail "down did not name the cache's failed stop: $(cat "$DIR/err")"
alive "$fpid" || fail "down stopped filed after the cache lost its write-back"
grep -q "gave up\|giving up" "$RUN/3-cached.log" || fail "the cache did not give up: the test proves nothing"

echo "--- filed killed; up again on the persist file, down writes back; read from filed"
kill -KILL "$fpid" "$vpid"
for _ in $(seq 100); do alive "$fpid" || alive "$vpid" || break; sleep 0.05; done
rm -f "$RUN"/*.pid
cat > "$DIR/fast.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed  port=1 dir=$DIR/data
peer vlmcd  port=2 blocker-port=1 volume=vol:8M object-size=1M
peer cached $cache
EOT
"$BIN/xseg" up "$DIR/fast.path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
expect_exit 0 timeout 60 "$BIN/xseg" down "$DIR/fast.path" --run-dir "$RUN" --timeout 20
printf 'segment %s ports=16\npeer filed port=1 dir=%s\npeer vlmcd port=2 blocker-port=1 volume=vol:8M object-size=1M\n' \
	"$SEG" "$DIR/data" > "$DIR/plain.txt"
"$BIN/xseg" up "$DIR/plain.txt" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
bench read
expect_exit 0 "$BIN/xseg" down "$DIR/plain.txt" --run-dir "$RUN"
echo "ok"
