#!/usr/bin/env bash
# The sustained run of issue 5 (thesis chapter 7): the cache holds half the
# workload. 4K random writes at iodepth 16 through filed alone, cached
# write-back and cached write-through (each on a fresh, empty cache), then
# cold read misses (an empty cache over data filed already has) against
# the same reads from filed alone. Prints one line per run with IOPS,
# p50/p99 and the IOPS of each twentieth of the run, then the ratios
# against filed alone. The same writes and reads also go through a bare hop
# (nulld --forward in cached's place, a peer that only passes requests on):
# the most any peer in front of filed can keep on this machine, printed
# beside cached's ratios. HOP=0 leaves it out. LIMITED=1 adds the
# thesis's "cached-limited" row: write-back with room for all the data but
# --max-objects at half the workload's objects (objects, not bytes, evicted).
#
# Every run writes over the same objects, filled once before the first:
# a write that grows a file costs filed the allocation of new pages, and on
# a VM that hands freed memory back to its host (free page reporting) a new
# page costs a fault in the host too, so runs on fresh objects paid more the
# later they came (filed alone, first, 260K writes/s; the same run after
# 2G of other objects, 160K). FRESH=1 gives each write run new objects, as
# this script did before.
#   TMPDIR=/dev/shm TOTAL=1G bench/run-cached-sustained.sh
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-sustained-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-1G}
BS=${BS:-4K}
DEPTH=${DEPTH:-16}
THREADS=${CACHED_THREADS:-}   # empty: cached's default
OUT=$(mktemp -d)
fpid= cpid= hpid=
cleanup() {
	# the cache first: it writes its dirty data back to filed before it exits
	for p in $cpid $hpid $fpid; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DATA" "$OUT"
}
trap cleanup EXIT

. bench/bench_lib.sh

bytes=$(python3 -c "
s='$TOTAL'; m={'K':1<<10,'M':1<<20,'G':1<<30}
print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
CACHE=$((bytes / 2))

run() {   # label op seed
	local label=$1 op=$2 seed=$3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" \
		--pattern rand --total-size "$TOTAL" --block-size "$BS" --iodepth "$DEPTH" \
		--object-size 4M --seed "$seed" --verify meta --timeout 120 --json \
		> "$OUT/$label.json" 2> "$OUT/$label.err" || { cat "$OUT/$label.err"; exit 1; }
	tail -1 "$OUT/$label.json" | python3 -c "
import json,sys; d=json.load(sys.stdin)
s=' '.join(f'{x/1000:.0f}' for x in d['slice_iops'])
print(f\"{'$label':14} {d['op']:5} {d['iops']:>9.0f} IOPS  p50 {d['lat_us_p50']:>7.1f} us  p99 {d['lat_us_p99']:>8.1f} us  failed {d['failed']} corrupted {d['corrupted']}\")
print(f\"{'':14} kIOPS per 5%: {s}\")"
}

start_cached() {   # policy [cache-size max-objects]
	"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size "${2:-$CACHE}" \
		--max-objects "${3:-65536}" --write-policy "$1" ${THREADS:+--threads "$THREADS"} ${CACHED_OPTS:-} \
		2> "$OUT/cached.log" & cpid=$!
	wait_bound 2
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null
}

stop_cached() {   # unplug (writes every dirty byte back), then stop
	"$BIN/xseg" unplug --segment "$SEG" --via 2 >/dev/null
	kill -TERM "$cpid"; wait "$cpid" 2>/dev/null
	cpid=
}

# The seed names the objects: one seed for all runs unless FRESH=1.
seed() { [ "${FRESH:-0}" = 1 ] && echo "$1" || echo 1; }

hop_runs() {   # the same writes and reads through a bare hop
	"$BIN/nulld" --segment "$SEG" --port 2 --forward 1 2> "$OUT/hop.log" & hpid=$!
	wait_bound 2
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null
	run hop write "$(seed 5)"
	run hop-read read 1
	"$BIN/xseg" unplug --segment "$SEG" --via 2 >/dev/null
	kill -TERM "$hpid"; wait "$hpid" 2>/dev/null
	hpid=
}

echo "sustained: $TOTAL of $BS random, iodepth $DEPTH, cache $((CACHE >> 20)) MiB (half), cached --threads ${THREADS:-default}"
[ "${LIMITED:-0}" = 1 ] && echo "cached-limited: cache $((bytes >> 20)) MiB, --max-objects $((bytes / (4 << 20) / 2)) (half the $((bytes / (4 << 20))) objects)"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 & fpid=$!
wait_bound 1

[ "${FRESH:-0}" = 1 ] || run fill write 1   # the objects every run writes over
run filed write 1
run filed-read read 1
[ "${HOP:-1}" = 0 ] || hop_runs
start_cached writeback
run cached-WB write "$(seed 2)"
stop_cached
if [ "${LIMITED:-0}" = 1 ]; then   # a bucket per block, half the objects
	start_cached writeback "$bytes" "$((bytes / (4 << 20) / 2))"
	run cached-lim write "$(seed 4)"
	stop_cached
fi
start_cached writethrough
run cached-WT write "$(seed 3)"
stop_cached
start_cached writeback
run cached-cold read 1      # every block a miss: filed has it, the cache is empty
stop_cached

python3 - "$OUT" <<'EOF'
import json, sys, os
def load(n):
    f = os.path.join(sys.argv[1], n + '.json')
    return json.loads(open(f).read().splitlines()[-1]) if os.path.exists(f) else None
d = {n: load(n) for n in ('filed', 'filed-read', 'hop', 'hop-read', 'cached-WB', 'cached-WT', 'cached-cold', 'cached-lim')}
def ratio(a, b): return d[a]['iops'] / d[b]['iops']
print(f"ratios to filed alone: WB writes {ratio('cached-WB','filed'):.2f}x, "
      f"WT writes {ratio('cached-WT','filed'):.2f}x, cold read misses "
      f"{ratio('cached-cold','filed-read'):.2f}x; WB's slowest 5%: "
      f"{min(d['cached-WB']['slice_iops'])/d['filed']['iops']:.2f}x filed's average")
if d['cached-lim']:
    print(f"cached-limited (--max-objects at half the workload's objects): WB writes "
          f"{ratio('cached-lim','filed'):.2f}x filed alone; slowest 5%: "
          f"{min(d['cached-lim']['slice_iops'])/d['filed']['iops']:.2f}x filed's average")
if d['hop']:
    print(f"a bare hop (nulld --forward) keeps: writes {ratio('hop','filed'):.2f}x, "
          f"reads {ratio('hop-read','filed-read'):.2f}x; cached against the hop: "
          f"WT writes {ratio('cached-WT','hop'):.2f}x, cold read misses "
          f"{ratio('cached-cold','hop-read'):.2f}x")
EOF
