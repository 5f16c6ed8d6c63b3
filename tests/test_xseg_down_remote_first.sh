#!/usr/bin/env bash
# Two paths joined by synapsed, each run with `xseg up` (host A and host B
# as two segments over loopback):
#   A: bench-xseg -> vlmcd -> cached (write-back, plugged) -> synapsed --remote
#   B:                          synapsed --listen -> filed
# `xseg down B` while A's cache held 16M of acknowledged writes for B's
# filed stopped synapsed B and filed, removed B's segment and exited 0:
# the data could no longer be written back, and A's down then failed
# with the cache gone dirty. Now down does not stop a synapsed listener
# while a requester (A's synapsed) is connected: it waits for it to leave
# (up to --timeout), then exits 1 with B untouched; `xseg down A` first
# writes the data back, and B's down then goes through. Every byte written
# reads back straight from B's filed.
set -u
SEG_PREFIX=xseg-down-remote
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/up_lib.sh"
RUNB=$DIR/runb
trap '"$BIN/xseg" down "$DIR/a.path" --run-dir "$RUN" > /dev/null 2>&1
      "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" > /dev/null 2>&1
      for f in "$RUN"/*.pid "$RUNB"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
      cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT
P=$(free_port)
cat > "$DIR/b.path" <<EOT
segment $SEGB ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data
peer synapsed port=2 listen=127.0.0.1:$P target-port=1 timeout=5
EOT
cat > "$DIR/a.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer synapsed port=5 remote=127.0.0.1:$P timeout=5
peer vlmcd port=2 blocker-port=5 volume=vol:16M object-size=1M
peer cached port=3 blocker-port=5 cache-size=64M object-size=1M write-policy=writeback dirty-high=100 dirty-low=100 plug=5
EOT
expect_exit 0 timeout 60 "$BIN/xseg" up "$DIR/b.path" --run-dir "$RUNB"
expect_exit 0 timeout 60 "$BIN/xseg" up "$DIR/a.path" --run-dir "$RUN"

"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op write \
	--pattern rand --total-size 16M --block-size 64K --iodepth 8 --seed 5 --verify full \
	--timeout 30 --json > "$DIR/w.out" 2> "$DIR/w.err" || fail "writes: $(tail -2 "$DIR/w.err")"
d=$(peer_stat 3 dirty_bytes)
[ "$d" -ge $((8 << 20)) ] || fail "only $d bytes dirty in A's cache: the test would prove nothing"
echo "A's cache holds $d dirty bytes for B's filed"

echo "--- xseg down B first: must not stop B while A's synapsed is connected"
expect_exit 1 timeout 60 "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" --timeout 2
cat "$DIR/out" "$DIR/err"
"$BIN/xseg" info --segment "$SEGB" > /dev/null 2>&1 || fail "down B removed B's segment"
"$BIN/xseg" status "$DIR/b.path" --run-dir "$RUNB" > "$DIR/st" ||
	fail "down B stopped part of B: $(cat "$DIR/st")"
grep -q "synapsed on port 2 .*1 requester" "$DIR/err" ||
	fail "down B did not say why (synapsed, its port, the requester): $(cat "$DIR/err")"

echo "--- reads through A still see every byte; then down A, then down B"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op read \
	--pattern rand --total-size 16M --block-size 64K --iodepth 8 --seed 5 --verify full \
	--timeout 30 --json > "$DIR/r.out" 2> "$DIR/r.err" ||
	fail "reads through A: $(tail -1 "$DIR/r.out") $(tail -2 "$DIR/r.err")"
# B's down started at once: it waits for A's synapsed to leave
"$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" --timeout 60 > "$DIR/db.out" 2> "$DIR/db.err" &
dbpid=$!
sleep 0.5
expect_exit 0 timeout 120 "$BIN/xseg" down "$DIR/a.path" --run-dir "$RUN" --timeout 60
wait $dbpid; rc=$?
cat "$DIR/db.out" "$DIR/db.err"
[ $rc = 0 ] || fail "down B after down A exited $rc"

"$BIN/xseg" create --segment "$SEGB" --ports 16 > /dev/null || fail "create for the store read"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
"$BIN/vlmcd" --segment "$SEGB" --port 2 --blocker-port 1 --volume vol:16M --object-size 1M \
	2> "$DIR/vlmcd2.log" & pids+=($!)
wait_bound_in "$SEGB" 2
"$BIN/bench-xseg" --segment "$SEGB" --port 10 --target-port 2 --volume vol --op read \
	--pattern rand --total-size 16M --block-size 64K --iodepth 8 --seed 5 --verify full \
	--timeout 30 --json > "$DIR/s.out" 2> "$DIR/s.err" ||
	fail "reads straight from B's filed: $(tail -1 "$DIR/s.out") $(tail -2 "$DIR/s.err")"
echo "ok"
