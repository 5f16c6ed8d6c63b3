#!/usr/bin/env bash
# cached over a failing blocker: filed fails a share of reads and writes.
# cached must never acknowledge a write it then loses, never return data it
# did not get, keep dirty data until it can be written, and report failures.
# Then filed is restarted healthy and everything written reads back intact.
set -u
SEG_PREFIX=cached-faults
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --fail-rate 20 --fail-seed 7 \
	2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 2M --max-objects 16 \
	--object-size 64K --write-policy writeback 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

# Writes land in the cache (some go through to the failing blocker when the
# pool is full); whatever is acknowledged must survive.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern rand \
	--object-size 64K --verify full --total-size 4M --block-size 4K --iodepth 8 --seed 1 \
	--timeout 60 --json --unacked "$DIR/unacked" > "$DIR/w.out" 2> "$DIR/w.err"
echo "writes: $(tail -1 "$DIR/w.out" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['requests'], 'answered,', d['failed'], 'failed')")"
acked=$(tail -1 "$DIR/w.out" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['requests']-d['failed'])")
[ "$acked" -gt 0 ] || fail "no write acknowledged at all"
# Reads: a failure is reported as a failure, never as data. Blocks whose
# write no reply acknowledged may hold anything (--may-differ), no other.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
	--object-size 64K --verify full --total-size 4M --block-size 4K --iodepth 8 --seed 1 \
	--timeout 60 --json --may-differ "$DIR/unacked" > "$DIR/r.out" 2> "$DIR/r.err"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] ||
	fail "a read returned wrong data: $(tail -1 "$DIR/r.out")"
# Unplugging needs every dirty byte on the blocker: it may fail now, and
# must say so; the cache keeps the data.
"$BIN/xseg" stats --segment "$SEG" --port 3 --json > "$DIR/stats.json" || fail "stats"
python3 -c "import json; d=json.load(open('$DIR/stats.json')); assert d['flush_failures'] + d['failed'] > 0, d" ||
	fail "the blocker's failures never reached cached: the test did not test anything"

# A healthy filed takes the port over; now everything must go through.
kill -KILL "$fpid"; wait "$fpid" 2>/dev/null
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
for _ in $(seq 100); do
	"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":1,"owner":[1-9][0-9]*,"alive":true' && break
	sleep 0.05
done
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug with a healthy blocker"
"$BIN/xseg" stats --segment "$SEG" --port 3 --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['dirty_bytes']==0, d" ||
	fail "dirty data left after unplug"
# Straight from filed: every acknowledged write is there. Blocks whose write
# failed may hold anything (--may-differ), block by block.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
	--object-size 64K --verify full --total-size 4M --block-size 4K --iodepth 8 --seed 1 \
	--timeout 60 --json --may-differ "$DIR/unacked" > "$DIR/f.out" 2> "$DIR/f.err"
[ "$(json "$DIR/f.out" failed)" = 0 ] && [ "$(json "$DIR/f.out" corrupted)" = 0 ] ||
	fail "an acknowledged write is missing from filed: $(tail -1 "$DIR/f.out")"
echo "cached over a failing blocker: ok"
