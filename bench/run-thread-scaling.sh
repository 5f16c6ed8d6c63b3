#!/usr/bin/env bash
# Issue 24's thread scaling: cached (write-back, every request a hit) with
# --threads 1, 2, 4, 8 against CLIENTS bench-xseg processes at once (each
# on a port of its own, over objects of its own, DEPTH requests in flight
# each), 4K random writes then reads, RUNTIME seconds a run; the IOPS
# summed over the clients. nulld with the same threads at the deepest
# depth is the IPC limit beside it. Then, per client count, the ratio the
# issue asks for: 8 threads / 1 thread at depth 64 (aim >= 5x).
# Made for a machine with cores to spare (16); on 2 vCPUs it says little.
#   THREADS ("1 2 4 8")  DEPTHS ("1 4 16 64")  CLIENTS ("1 4 7")
#   LANES (8): cached and nulld bind port 2 with --lanes LANES (ports 2..),
#              so each client queues on a lane of its own; 1: one queue
#   RUNTIME (1)  WS (16M: each client's working set)  BS (4K)
#   BIN=$PWD/build-static/bin bench/run-thread-scaling.sh
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=thread-scaling-$$
DATA=$(mktemp -d)
THREADS=${THREADS:-"1 2 4 8"} DEPTHS=${DEPTHS:-"1 4 16 64"} CLIENTS=${CLIENTS:-"1 4 7"}
RUNTIME=${RUNTIME:-1} WS=${WS:-16M} BS=${BS:-4K} LANES=${LANES:-8}
lanes=(); [ "$LANES" -gt 1 ] && lanes=(--lanes "$LANES")
pids=()
trap bench_cleanup EXIT

# clients N DEPTH OP PORT [--runtime S]: N bench-xseg at once (ports 10+LANES..),
# client i over seed 100+i's objects; prints "IOPS p99_us" (IOPS summed,
# the worst client's p99), or exits naming the client that failed.
clients() {
	local n=$1 depth=$2 op=$3 port=$4 i cpids=(); shift 4
	for ((i = 0; i < n; i++)); do
		"$BIN/bench-xseg" --segment "$SEG" --port $((10 + i)) --target-port "$port" \
			--op "$op" --pattern rand --total-size "$WS" --block-size "$BS" \
			--iodepth "$depth" --object-size 4M --seed $((100 + i)) --timeout 10 \
			--json "$@" > "$DATA/c$i.json" 2> "$DATA/c$i.err" & cpids+=($!)
	done
	for ((i = 0; i < n; i++)); do
		wait "${cpids[i]}" || { echo "client $i ($op depth $depth to port $port) failed:" \
			"$(tail -1 "$DATA/c$i.err")" >&2; exit 1; }
	done
	for ((i = 0; i < n; i++)); do tail -1 "$DATA/c$i.json"; done | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin]
assert all(r["failed"] == 0 for r in runs), "failed requests"
print("%.0f %.1f" % (sum(r["iops"] for r in runs), max(r["lat_us_p99"] for r in runs)))'
}

# start NAME PORT ARGS...: a peer on PORT, waited for; its pid in $pid.
start() {
	local name=$1 port=$2; shift 2
	"$@" --segment "$SEG" --port "$port" --log-level error & pid=$!; pids+=($pid)
	wait_bound "$port"
}
stop_last() {   # the peer started last, stopped and waited for
	kill -TERM "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null; unset 'pids[-1]'
}

maxc=0; for c in $CLIENTS; do [ "$c" -gt "$maxc" ] && maxc=$c; done
deepest=0; for d in $DEPTHS; do [ "$d" -gt "$deepest" ] && deepest=$d; done
echo "thread scaling (issue 24): $BS random, runs of ${RUNTIME}s over $WS a client, clients $CLIENTS, lanes $LANES"
echo "$(date -u '+%F %T UTC'), $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/xseg" create --segment "$SEG" --ports $((16 + LANES + maxc)) --requests 4096 --heap 1G >/dev/null || exit 1
start filed 1 "$BIN/filed" --dir "$DATA" --threads 2

declare -A iops
# measure WHO THREADS DEPTHS: every client count and op at those depths
# against port 2, one line each, IOPS kept in iops[WHO,T,C,D,OP].
measure() {
	local who=$1 t=$2 c d op n p99; shift 2
	for c in $CLIENTS; do
		for d in "$@"; do
			for op in write read; do
				read -r n p99 < <(clients "$c" "$d" "$op" 2 --runtime "$RUNTIME") || exit 1
				iops[$who,$t,$c,$d,$op]=$n
				printf '%-6s threads %d  clients %d  depth %2d  %-5s %9.0f IOPS  p99 %8.1f us\n' \
					"$who" "$t" "$c" "$d" "$op" "$n" "$p99"
			done
		done
	done
}
for t in $THREADS; do
	start cached 2 "$BIN/cached" --blocker-port 1 --cache-size 2G --max-objects 4096 \
		--write-policy writeback --threads "$t" "${lanes[@]}"
	clients "$maxc" 16 write 2 >/dev/null   # every later request a hit
	measure cached "$t" $DEPTHS
	stop_last
	start nulld 2 "$BIN/nulld" --threads "$t" "${lanes[@]}"
	measure nulld "$t" "$deepest"
	stop_last
done

first=${THREADS%% *} last=${THREADS##* }
for c in $CLIENTS; do
	for op in write read; do
		for who in cached nulld; do
			a=${iops[$who,$first,$c,$deepest,$op]:-} b=${iops[$who,$last,$c,$deepest,$op]:-}
			[ -n "$a" ] && [ -n "$b" ] || continue
			echo "$who $op, clients $c, depth $deepest: $last threads / $first thread" \
				"$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", b / a }')" \
				"$([ "$who" = cached ] && echo '(aim >= 5x at 8 / 1)')"
		done
	done
done
