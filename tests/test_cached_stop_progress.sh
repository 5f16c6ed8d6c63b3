#!/usr/bin/env bash
# A stop's write-back says how far it is: cached holding 4M dirty in 64
# objects over a filed whose every write takes 100 ms (one thread) needs
# about 6 s to write it back on SIGTERM. It said "writing back every dirty
# byte" and then nothing until it exited; now a line every 5 s gives the
# dirty bytes left and the bytes written so far, and a last line the
# total. The data was at risk (4M dirty in cached alone, none on filed)
# and every acknowledged byte reads back from filed after the stop.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-stop-progress
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 1 --delay-us 100000 \
	2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writeback --dirty-high 95 --dirty-low 90 --log-level info \
	2> "$DIR/cached.log" & cpid=$!; pids+=($cpid)
wait_bound 3

bench() {   # bench OP TARGET_PORT OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$2" --op "$1" --prefix p \
		--object-size 64K --pattern seq --total-size 4M --block-size 64K --iodepth 8 --seed 3 \
		--verify full --timeout 30 --json > "$3" 2> "$3.err"
}
bench write 3 "$DIR/w.out" || { cat "$DIR/w.out.err"; fail "the writes into cached"; }
dirty=$(peer_stat 3 dirty_bytes)
on_filed=$(find "$DIR/data" -type f 2>/dev/null | wc -l)
echo "before the stop: $dirty bytes dirty in cached, $on_filed objects on filed"
[ "$dirty" = $((4 << 20)) ] && [ "$on_filed" = 0 ] || fail "the data was not at risk in cached alone"

kill -TERM "$cpid"
wait "$cpid"; rc=$?
grep "stopping" "$DIR/cached.log"
[ "$rc" = 0 ] || fail "cached's stop exited $rc"
grep -qE "stopping: [0-9]+ dirty bytes left to write back to port 1, [0-9]+ bytes written to it in [0-9]+ s" \
	"$DIR/cached.log" || fail "no progress line during a write-back of 6 s"
grep -qE "stopping: every dirty byte written back \(4194304 bytes written to port 1 in [0-9.]+ s\)" \
	"$DIR/cached.log" || fail "no last line with the bytes written back"

# read through a second filed on the same directory, without the delay
"$BIN/filed" --segment "$SEG" --port 2 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
wait_bound 2
bench read 2 "$DIR/r.out" || { tail -1 "$DIR/r.out"; fail "what cached acknowledged is not on filed"; }
echo "every acknowledged byte read back from filed"
echo "PASS"
