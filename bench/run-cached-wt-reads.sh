#!/usr/bin/env bash
# The thesis's write-through read row (Table 7.4: reads through cached
# write-through, +25 % over the blocker alone): 4K random reads, pass after
# pass over a working set that fits the cache, through cached write-through
# in front of filed and straight to filed, the two runs of a round one
# right after the other (order swapped every other round); prints each
# round's IOPS and ratio, and the median ratio cached / filed. The working
# set is written once through cached (write-through: into filed and the
# cache) and read once through it before the rounds, so every read hits.
#   ROUNDS (3)  TOTAL (64M: the working set; the cache is twice that)
#   RUNTIME (1: seconds a run)  BS (4K)  DEPTH (16)  CACHED_THREADS
#   TMPDIR (/dev/shm): filed's objects
#   ROUNDS=3 TOTAL=64M bench/run-cached-wt-reads.sh
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=cached-wt-reads-$$
DATA=$(mktemp -d)
ROUNDS=${ROUNDS:-3} TOTAL=${TOTAL:-64M} RUNTIME=${RUNTIME:-1} BS=${BS:-4K} DEPTH=${DEPTH:-16}
pids=()
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

bytes=$(python3 -c "
s='$TOTAL'; m={'K':1<<10,'M':1<<20,'G':1<<30}
print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2 --log-level error & pids+=($!)
"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size "$((bytes * 2))" \
	--max-objects 4096 --write-policy writethrough ${CACHED_THREADS:+--threads "$CACHED_THREADS"} \
	--log-level error & pids+=($!)
wait_bound 1; wait_bound 2

iops() {   # port op [once]: IOPS of one run (one pass where "once" is given)
	local time=(--runtime "$RUNTIME")
	[ -n "${3:-}" ] && time=()
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op "$2" \
		--pattern rand --total-size "$TOTAL" --block-size "$BS" --iodepth "$DEPTH" \
		--object-size 4M --seed 1 --json "${time[@]}" | tail -1 |
		python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["iops"])'
}
echo "write-through reads (hits) vs filed alone: $BS random, depth $DEPTH, ${RUNTIME}s runs over $TOTAL, $ROUNDS rounds"
echo "first passes: writes through cached $(iops 2 write once), reads through cached $(iops 2 read once) IOPS"
ratios=()
for r in $(seq "$ROUNDS"); do
	if (( r % 2 )); then f=$(iops 1 read); c=$(iops 2 read); else c=$(iops 2 read); f=$(iops 1 read); fi
	[ -n "$f" ] && [ -n "$c" ] || { echo "round $r: a run failed" >&2; continue; }
	ratio=$(python3 -c "print('%.2f' % ($c / $f))")
	ratios+=("$ratio")
	echo "round $r: filed $f  cached write-through $c IOPS  ($ratio x)"
done
[ ${#ratios[@]} -gt 0 ] || exit 1
printf '%s\n' "${ratios[@]}" | sort -n |
	awk '{ a[NR] = $1 } END { print "write-through reads / filed alone, median: " a[int((NR + 1) / 2)] "x (thesis: 1.25x over sosd)" }'
