#!/usr/bin/env bash
# The path without a cache (issue 4): bench-xseg against filed directly and
# through vlmcd, 4K and 64K random reads and writes at iodepth 1, 4, 16.
# filed keeps its data under $TMPDIR (tmpfs by default: the path, not a disk).
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=path-bench-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-32M}
pids=()
trap bench_cleanup EXIT
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 & pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:1G & pids+=($!)
sleep 0.5
seed=0
for target in filed vlmcd; do
	for bs in 4K 64K; do for depth in 1 4 16; do for op in write read; do
		[ $op = write ] && seed=$((seed + 1))
		if [ $target = filed ]; then args=(--target-port 1 --object-size 4M)
		else args=(--target-port 2 --volume vol); fi
		"$BIN/bench-xseg" --segment "$SEG" --port 10 "${args[@]}" --op $op --pattern rand \
			--total-size "$TOTAL" --block-size $bs --iodepth $depth --seed $seed --json |
		tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"$target {d['op']:5} bs={d['block_size']//1024:>2}K depth={d['iodepth']:>2} {d['iops']:>9.0f} IOPS {d['mib_per_s']:>8.1f} MiB/s p50 {d['lat_us_p50']:>7.1f} us p99 {d['lat_us_p99']:>8.1f} us failed {d['failed']}\")"
	done; done; done
done
