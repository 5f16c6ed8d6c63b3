#!/usr/bin/env bash
# xseg down of a path whose write-back cache died (SIGKILL) holding dirty
# data before down ran: docs/interfaces.md says "a cache gone holding dirty
# bytes, stops `down` there (exit 1, the rest left running, segment
# kept)". down must not stop the blocker and remove the segment (and with
# it the port's fail-closed mark) when the cache's pidfile names a dead pid.
set -u
SEG_PREFIX=xseg-down-dirty
. "$(dirname "$0")/lib.sh"

RUN=$DIR/run
down_all() {
	"$BIN/xseg" down "$DIR/path.path" --run-dir "$RUN" --timeout 10 > /dev/null 2>&1
	for f in "$RUN"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
	cleanup
}
trap down_all EXIT

path=$DIR/path.path
cat > "$path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed  port=1 dir=$DIR/data
peer vlmcd  port=2 blocker-port=1 volume=vol:16M object-size=1M
peer cached port=3 blocker-port=1 cache-size=64M object-size=1M write-policy=writeback dirty-high=100 dirty-low=100 plug=1
EOT
"$BIN/xseg" up "$path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"

"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op write \
	--pattern seq --total-size 16M --block-size 64K --iodepth 8 --seed 2 --verify full \
	--timeout 30 --json > "$DIR/w.out" 2> "$DIR/w.err" || fail "writes: $(tail -2 "$DIR/w.err")"
d=$(port_info 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "nothing dirty in the cache: the test would prove nothing"
echo "cached holds $d dirty bytes on port 3"

cpid=$(cat "$RUN"/3-cached.pid)
kill -KILL "$cpid"
for _ in $(seq 100); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.05; done
[ "$(port_info 3 dirty_bytes)" -gt 0 ] || fail "the dead cache's port lost its mark"

echo "--- xseg down with the cache gone dirty: must stop there (exit 1, segment kept)"
"$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 20 > "$DIR/out" 2> "$DIR/err"; rc=$?
echo "down exit $rc"; cat "$DIR/out" "$DIR/err"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 ||
	fail "down removed the segment (and the fail-closed mark of $d dirty bytes) although the cache died dirty (exit $rc)"
[ $rc = 1 ] || fail "down exited $rc with a cache gone holding dirty bytes"
grep -q "dirty bytes" "$DIR/err" || fail "down did not say why: $(cat "$DIR/err")"
echo "ok"
