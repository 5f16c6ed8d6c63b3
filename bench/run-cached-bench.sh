#!/usr/bin/env bash
# cached against filed alone (issue 5's benchmark, thesis chapter 7 on this
# machine). Prints one line per run: path, op, block size, iodepth, IOPS,
# MiB/s, p50/p99 latency. Data lives under a temporary directory (tmpfs
# when TMPDIR points there, so filed measures the path, not the disk).
#   bench/run-cached-bench.sh [quick]
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-bench-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-64M}
pids=()
trap bench_cleanup EXIT


seed=100
run() {   # label op bs depth [total]
	local label=$1 op=$2 bs=$3 depth=$4 total=${5:-$TOTAL}
	seed=$((seed + 1))
	[ "$op" = read ] && seed=$((seed - 1))     # read what the write before wrote
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" \
		--pattern rand --total-size "$total" --block-size "$bs" --iodepth "$depth" \
		--object-size 4M --seed "$seed" --json | tail -1 |
	python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"$label  {d['op']:5} bs={d['block_size']//1024:>3}K depth={d['iodepth']:>2}  {d['iops']:>9.0f} IOPS {d['mib_per_s']:>8.1f} MiB/s  p50 {d['lat_us_p50']:>7.1f} us  p99 {d['lat_us_p99']:>8.1f} us  failed {d['failed']}\")"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 & pids+=($!)
wait_bound 1

depths=${DEPTHS:-"4 16"}
sizes=${SIZES:-"4K 64K"}
for bs in $sizes; do for d in $depths; do
	run "filed       " write "$bs" "$d"
	run "filed       " read "$bs" "$d"
done; done

"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size 1G \
	--max-objects 4096 --write-policy writeback ${CACHED_THREADS:+--threads "$CACHED_THREADS"} & pids+=($!)
wait_bound 2
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null
for bs in $sizes; do for d in $depths; do
	run "cached (WB) " write "$bs" "$d"
	run "cached (WB) " read "$bs" "$d"
done; done
"$BIN/xseg" stats --segment "$SEG" --port 2
