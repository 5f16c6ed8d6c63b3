#!/usr/bin/env bash
# vlmcd's own cost, two builds side by side: bench-xseg -> vlmcd -> nulld
# (one worker each), 4K random writes then reads at depth 16 over a 64M
# volume, RUNTIME seconds a run; each build's IOPS and vlmcd's CPU per
# request (utime + stime from /proc over the run), builds alternating over
# ROUNDS rounds, then the medians.
#   bench/run-vlmcd-ab.sh OLD_BIN NEW_BIN     ROUNDS (3)  RUNTIME (2)
set -u
cd "$(dirname "$0")/.."
[ $# = 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN (two build/bin folders)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3} RUNTIME=${RUNTIME:-2}
SEG=vlmcd-ab-$$
pids=()
BIN=$1
. bench/bench_lib.sh
trap 'stop_peers; "$BIN/xseg" destroy --segment "$SEG" 2>/dev/null' EXIT

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
one() {   # one BIN: a line per op, "OP IOPS US_PER_OP"
	BIN=$1 pids=()
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 256M >/dev/null ||
		exit 1
	"$BIN/nulld" --segment "$SEG" --port 1 --threads 1 2>/dev/null & pids+=($!)
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume v:64M --threads 1 \
		2>/dev/null & pids+=($!)
	wait_bound 1; wait_bound 2
	local v=${pids[1]} op c0 c1 out
	for op in write read; do
		c0=$(cpu_ticks "$v")
		out=$("$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume v \
			--op "$op" --pattern rand --total-size 64M --iodepth 16 --runtime "$RUNTIME" \
			--json | tail -1)
		c1=$(cpu_ticks "$v")
		python3 -c "
import json, os, sys
d = json.loads(sys.argv[1])
print(sys.argv[2], round(d['iops']), round(($c1 - $c0) * 1e6 / os.sysconf('SC_CLK_TCK') / d['requests'], 3))" \
			"$out" "$op"
	done
	stop_peers
	"$BIN/xseg" destroy --segment "$SEG"
}

echo "vlmcd A/B: bench-xseg -> vlmcd -> nulld, 4K random, depth 16, ${RUNTIME}s a run, $ROUNDS rounds"
echo "$(date -u '+%F %T UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A runs
for r in $(seq "$ROUNDS"); do
	for b in "$1" "$2"; do
		while read -r op iops us; do
			echo "round $r  $b  $op  $iops IOPS  vlmcd $us us/op"
			runs[$b,$op]+="$iops:$us "
		done < <(one "$b")
	done
done
for b in "$1" "$2"; do
	for op in write read; do
		python3 -c "
import statistics, sys
v = [tuple(map(float, x.split(':'))) for x in sys.argv[3].split()]
print(f'median  {sys.argv[1]}  {sys.argv[2]:5}  {statistics.median(i for i, _ in v):,.0f} IOPS  vlmcd {statistics.median(u for _, u in v):.3f} us/op')" \
			"$b" "$op" "${runs[$b,$op]}"
	done
done
