#!/usr/bin/env bash
# The IPC limit: round trips per second and latency through the segment
# against nulld, which answers every request at once. 4K READs, no data
# touched. Cases: nulld with 1 or 2 threads, 1 or 2 client processes (each
# its own port), iodepth 1 and 16 per client. With 2 clients and 2 nulld
# threads there are more busy threads than cores on a 2-core machine.
#   bench/run-ipc-bench.sh          (REQUESTS=N per client, default 400000)
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=ipc-bench-$$
REQUESTS=${REQUESTS:-400000}
DIR=$(mktemp -d)
npid=
cleanup() {
	[ -n "$npid" ] && kill -TERM "$npid" 2>/dev/null && wait "$npid" 2>/dev/null
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || exit 1

printf "%-8s %-8s %-7s %12s %10s %10s %10s\n" nulld clients depth "round trips/s" "p50 us" "p99 us" "p99.9 us"
for nthreads in 1 2; do
	"$BIN/nulld" --segment "$SEG" --port 1 --threads "$nthreads" & npid=$!
	sleep 0.2
	for clients in 1 2; do
		for depth in 1 16; do
			for c in $(seq "$clients"); do
				"$BIN/bench-xseg" --segment "$SEG" --port $((1 + c)) --target-port 1 \
					--op read --pattern seq --block-size 4K --object-size 4M \
					--total-size $((REQUESTS * 4))K --iodepth "$depth" --json \
					> "$DIR/c$c.json" 2>/dev/null &
			done
			wait $(jobs -p | grep -v "^$npid$") 2>/dev/null
			python3 - "$DIR" "$clients" "$nthreads" "$depth" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
rs = [json.loads(open(f"{d}/c{c}.json").read().strip().splitlines()[-1]) for c in range(1, n + 1)]
iops = sum(r["iops"] for r in rs)
p50 = max(r["lat_us_p50"] for r in rs); p99 = max(r["lat_us_p99"] for r in rs)
p999 = max(r["lat_us_p999"] for r in rs)
print(f"{sys.argv[3]:<8} {n:<8} {sys.argv[4]:<7} {iops:>12.0f} {p50:>10.2f} {p99:>10.2f} {p999:>10.2f}")
PY
		done
	done
	kill -TERM "$npid"; wait "$npid"; npid=
done
