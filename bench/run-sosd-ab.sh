#!/usr/bin/env bash
# Two sosd builds (or option sets) against each other on one throw-away
# micro-Ceph, in pairs whose order alternates (A B, B A, ...): on two vCPUs
# shared with the OSD a run's IOPS swing more from one minute to the next
# than two builds differ, so only B/A within a pair means anything. Prints
# each pair and the median of B/A per op.
#   A, B     sosd binary, optionally ":OPTIONS" with commas for spaces
#            (B=build/bin/sosd:--threads,2); A defaults to build/bin/sosd
#   OPS      (write read)  ROUNDS (6)  BS (4K)  DEPTH (16)  TOTAL (64M)
#   METRIC   bench-xseg's JSON field to compare (iops; lat_us_p50 for latency)
# The objects are written once before the first pair, and every write run
# overwrites them (memstore fills a new object far slower).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
A=${A:-$BIN/sosd} B=${B:?B=path-to-sosd[:options] is required}
SEG=sosd-ab-$$
CEPH_DIR=$(mktemp -d /tmp/sosd-ab.XXXXXX)
TOTAL=${TOTAL:-64M} BS=${BS:-4K} DEPTH=${DEPTH:-16} METRIC=${METRIC:-iops}
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	tools/micro-ceph stop "$CEPH_DIR" >/dev/null 2>&1
	rm -rf "$CEPH_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. bench/bench_lib.sh
start_ceph_and_segment
port=1
for v in "$A" "$B"; do
	bin=${v%%:*} opts=
	[[ $v == *:* ]] && opts=${v#*:}
	"$bin" --segment "$SEG" --port $port --pool xseg --conf "$CONF" ${opts//,/ } & pids+=($!)
	wait_bound $port
	port=$((port + 1))
done
run() {   # op port
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$2" --op "$1" --pattern rand \
		--total-size "$TOTAL" --block-size "$BS" --iodepth "$DEPTH" --object-size 4M \
		--seed 1 --timeout 120 --json | tail -1 |
	python3 -c "import json,sys; print(round(json.load(sys.stdin)['$METRIC']))"
}
run write 1 > /dev/null
for op in ${OPS:-write read}; do
	ratios=()
	for r in $(seq "${ROUNDS:-6}"); do
		if [ $((r % 2)) = 1 ]; then a=$(run "$op" 1); b=$(run "$op" 2)
		else b=$(run "$op" 2); a=$(run "$op" 1); fi
		ratios+=("$(python3 -c "print(f'{$b / $a:.2f}')")")
		echo "$op $BS depth $DEPTH round $r: A $a  B $b  $METRIC B/A ${ratios[-1]}"
	done
	printf '%s\n' "${ratios[@]}" | python3 -c \
		"import statistics,sys; print('$op median B/A: %.2f' % statistics.median(float(x) for x in sys.stdin))"
done
