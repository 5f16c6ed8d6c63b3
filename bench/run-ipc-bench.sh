#!/usr/bin/env bash
# The IPC limit: round trips per second and latency through the segment
# against nulld, which answers every request at once (ipc-bench: no
# buffers, no data). Cases: nulld with 1 or 2 threads, ipc-bench with 1 or
# 2 threads (each its own port), iodepth 1 and 16 per client thread. With 2
# nulld threads and 2 client threads there are more busy threads than cores
# on a 2-core machine. The last row has nobody spinning (--spin-us 0): every
# round trip pays two futex wake-ups.
#   bench/run-ipc-bench.sh         SECS=N per case (default 2), BUILD=dir
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SECS=${SECS:-2}
SEG=ipc-bench-$$-$RANDOM
DIR=$(mktemp -d)
npid= cpid=

stop_nulld() {
	[ -n "$npid" ] || return 0
	kill -TERM "$npid" 2>/dev/null
	wait "$npid"; local rc=$?
	npid=
	return $rc
}
cleanup() {
	[ -n "$cpid" ] && kill -TERM "$cpid" 2>/dev/null && wait "$cpid" 2>/dev/null
	stop_nulld
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in xseg nulld ipc-bench; do
	[ -x "$BIN/$p" ] || { echo "run-ipc-bench: $BIN/$p missing; run make first" >&2; exit 1; }
done
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 16M || exit 1

# start_nulld THREADS SPIN_US: nulld on port 1, returns once it has bound it.
start_nulld() {
	"$BIN/nulld" --segment "$SEG" --port 1 --threads "$1" --spin-us "$2" \
		--log-level warn 2>> "$DIR/nulld.log" &
	npid=$!
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq '"port":1,"owner":[1-9]' && return 0
		kill -0 "$npid" 2>/dev/null || break
		sleep 0.05
	done
	echo "run-ipc-bench: nulld did not start:" >&2; cat "$DIR/nulld.log" >&2
	exit 1
}

# run_case NULLD_THREADS CLIENT_THREADS DEPTH SPIN_US: one table row.
run_case() {
	start_nulld "$1" "$4"
	"$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --threads "$2" \
		--iodepth "$3" --seconds "$SECS" --spin-us "$4" --json > "$DIR/out" &
	cpid=$!
	wait "$cpid"; local rc=$?
	cpid=
	stop_nulld || { echo "run-ipc-bench: nulld did not exit 0" >&2; exit 1; }
	[ $rc -eq 0 ] || { echo "run-ipc-bench: ipc-bench failed ($rc)" >&2; exit 1; }
	tail -n 1 "$DIR/out" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("%6s %7d %5d %7s %13.0f %8.2f %8.2f %9.2f %9.1f" % (sys.argv[1], r["threads"],
      r["iodepth"], sys.argv[2], r["rps"], r["lat_us_p50"], r["lat_us_p99"],
      r["lat_us_p999"], r["lat_us_max"]))
' "$1" "$4"
}

echo "ipc-bench against nulld, $SECS s per case, $(nproc) CPUs"
printf "%6s %7s %5s %7s %13s %8s %8s %9s %9s\n" nulld clients depth spin_us \
	"round trips/s" "p50 us" "p99 us" "p99.9 us" "max us"
for nthreads in 1 2; do
	for clients in 1 2; do
		for depth in 1 16; do
			run_case "$nthreads" "$clients" "$depth" 50
		done
	done
done
run_case 1 1 1 0
