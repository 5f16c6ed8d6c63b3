#!/usr/bin/env bash
# Issue 5's benchmark 3: cached (write-back, cache larger than the workload)
# with 1, 2 and 4 worker threads, bench-xseg at iodepth 1, 4, 16 and 64;
# 4K random writes, then reads of the same blocks (hits). One line per run.
#   TMPDIR=/dev/shm bench/run-cached-threads.sh
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-threads-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-64M}
THREADS=${THREADS:-"1 2 4"}
DEPTHS=${DEPTHS:-"1 4 16 64"}
fpid= cpid=
cleanup() {
	for p in $cpid $fpid; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DATA"
}
trap cleanup EXIT

. bench/bench_lib.sh

run() {   # threads op depth seed
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$2" --pattern rand \
		--total-size "$TOTAL" --block-size 4K --iodepth "$3" --object-size 4M --seed "$4" \
		--json | tail -1 | python3 -c "
import json,sys; d=json.load(sys.stdin)
print(f\"threads {$1}  {d['op']:5} depth {d['iodepth']:>2}  {d['iops']:>9.0f} IOPS  p50 {d['lat_us_p50']:>7.1f} us  p99 {d['lat_us_p99']:>8.1f} us  failed {d['failed']}\")"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 & fpid=$!
wait_bound 1
seed=1
for t in $THREADS; do
	"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size 1G \
		--max-objects 4096 --write-policy writeback --threads "$t" & cpid=$!
	wait_bound 2
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null
	for d in $DEPTHS; do
		seed=$((seed + 1))
		run "$t" write "$d" "$seed"
		run "$t" read "$d" "$seed"
	done
	"$BIN/xseg" unplug --segment "$SEG" --via 2 >/dev/null
	kill -TERM "$cpid"; wait "$cpid" 2>/dev/null; cpid=
done
