#!/usr/bin/env bash
# Two path files with one --run-dir (PORT-PROGRAM.pid names collide), or a
# path brought up again while peers of an earlier run of it still run: a
# pidfile of the run directory names a live peer that xseg up started with
# that very pidfile, for another segment. The second up started its peer,
# which refused the pidfile, and its undo ("stopping what was started")
# sent SIGTERM to the pid the pidfile named: the first path's filed, with
# a dirty write-back cache in front of it. And `xseg down` of the second
# path (its segment never made) did the same. Now up refuses before it
# starts anything, naming the pidfile, the pid and its segment, and down
# leaves another segment's peer alone; the first path is untouched, and
# every byte written through its cache reads back from its store.
set -u
SEG_PREFIX=xseg-pid-in-use
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/up_lib.sh"
SEGY=$SEG-y
trap 'down_all; "$BIN/xseg" destroy --segment "$SEGY" > /dev/null 2>&1' EXIT

x=$DIR/x.path y=$DIR/y.off
cat > "$x" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data log-level=info stop-timeout=5
peer cached port=3 blocker-port=1 cache-size=64M object-size=1M write-policy=writeback dirty-high=100 dirty-low=100 plug=1
EOT
# not *.path: down_all must not run it before the fix is in (it stops x's filed)
cat > "$y" <<EOT
segment $SEGY ports=16
peer filed port=1 dir=$DIR/data-y
EOT
expect_exit 0 timeout 60 "$BIN/xseg" up "$x" --run-dir "$RUN"
fpid=$(cat "$RUN/1-filed.pid")

"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern rand \
	--total-size 16M --block-size 64K --object-size 1M --iodepth 8 --seed 7 \
	--verify full --timeout 30 --json > "$DIR/w.out" 2> "$DIR/w.err" ||
	fail "writes: $(tail -2 "$DIR/w.err")"
d=$(peer_stat 3 dirty_bytes)
[ "$d" -ge $((8 << 20)) ] || fail "only $d bytes dirty in the cache: the test would prove nothing"
echo "the cache holds $d dirty bytes in front of filed (pid $fpid)"

echo "--- up of another path with the same run directory"
expect_exit 1 timeout 60 "$BIN/xseg" up "$y" --run-dir "$RUN"
cat "$DIR/out" "$DIR/err"
grep -q "signal 15" <(grep "filed\[$fpid\]" "$RUN/1-filed.log") &&
	fail "the failed up of $y sent SIGTERM to the filed of $x (pid $fpid)"
grep -q "1-filed.pid names pid $fpid, a filed of segment $SEG (" "$DIR/err" ||
	fail "up did not name the pidfile, the pid and its segment: $(cat "$DIR/err")"
grep -q "stopping\|serves" "$DIR/out" && fail "up started a peer before refusing: $(cat "$DIR/out")"
"$BIN/xseg" info --segment "$SEGY" > /dev/null 2>&1 && fail "the failed up left segment $SEGY"

echo "--- down of that path (its segment does not exist)"
expect_exit 0 timeout 60 "$BIN/xseg" down "$y" --run-dir "$RUN" --timeout 10
cat "$DIR/out" "$DIR/err"
grep -q "signal 15" <(grep "filed\[$fpid\]" "$RUN/1-filed.log") &&
	fail "down of $y sent SIGTERM to the filed of $x (pid $fpid)"
alive "$fpid" || fail "the filed of $x is gone"
[ "$(cat "$RUN/1-filed.pid" 2>/dev/null)" = "$fpid" ] || fail "the pidfile of $x's filed was removed"

echo "--- the first path: every byte through the cache, down, every byte from the store"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
	--total-size 16M --block-size 64K --object-size 1M --iodepth 8 --seed 7 \
	--verify full --timeout 30 --json > "$DIR/r.out" 2> "$DIR/r.err" ||
	fail "reads through the cache: $(tail -1 "$DIR/r.out") $(tail -2 "$DIR/r.err")"
expect_exit 0 timeout 120 "$BIN/xseg" down "$x" --run-dir "$RUN" --timeout 60
"$BIN/xseg" create --segment "$SEG" --ports 16 > /dev/null || fail "create for the store read"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
wait_bound 1
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
	--total-size 16M --block-size 64K --object-size 1M --iodepth 8 --seed 7 \
	--verify full --timeout 30 --json > "$DIR/s.out" 2> "$DIR/s.err" ||
	fail "reads straight from filed: $(tail -1 "$DIR/s.out") $(tail -2 "$DIR/s.err")"
echo "ok"
