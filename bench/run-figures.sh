#!/usr/bin/env bash
# Data for the figures in docs/figures/ (bench/plot draws them): one
# JSON-lines file per figure in RESULTS_DIR, each line bench-xseg's --json
# object with "path" (and "threads") added:
#   blocksize.jsonl  4K..1M at iodepth 16, filed alone and cached write-back
#                    (hits), writes then reads of the same blocks
#   depth.jsonl      iodepth 1..64 at 4K, the same paths and ops
#   overtime.jsonl   --interval-json lines of a sustained 4K random write run
#                    at iodepth 16 (cache = half the working set): filed
#                    alone, cached write-back, cached write-through
#   threads.jsonl    cached --threads 1,2 x iodepth 1..32, 4K write-back hits
#   meta.json        where (CPUs), and per part (sweeps, threads, overtime)
#                    when, which commit, the load average before and after
# Every point is a --runtime run over a working set filed has (filled once),
# on tmpfs when TMPDIR=/dev/shm: the path is measured, not a disk. Data is
# not verified (--verify none; a failed request still fails the script):
# meta stamps are per block size, and a --runtime run need not cover every
# block, so a read could meet another block size's stamps. About
# 5 minutes on 2 CPUs; QUICK=1 about 30 s (fewer points, shorter runs).
#   TMPDIR=/dev/shm bench/run-figures.sh RESULTS_DIR && bench/plot RESULTS_DIR docs/figures
# Variables: FIGS (which parts, default "sweeps threads overtime": sweeps
# makes blocksize and depth; the other files are left as they are), QUICK, T (seconds per point), OT (seconds per over-time run),
# OI (seconds per over-time interval), WS (working set of the sweeps), OT_WS (of the over-time run), SIZES,
# CACHE (of the sweeps, 1G), DEPTHS, TDEPTHS, THREADS.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
RES=${1:?usage: bench/run-figures.sh RESULTS_DIR}
SEG=figures-$$
DATA=$(mktemp -d)
pids=()
trap bench_cleanup EXIT
. bench/bench_lib.sh

if [ "${QUICK:-0}" = 1 ]; then
	T=${T:-0.3} OT=${OT:-2} OI=${OI:-0.25} WS=${WS:-16M} OT_WS=${OT_WS:-32M} CACHE=${CACHE:-64M}
	SIZES=${SIZES:-"4K 64K 1M"} DEPTHS=${DEPTHS:-"1 16"}
	TDEPTHS=${TDEPTHS:-"1 16"} THREADS=${THREADS:-"1 2"}
else
	T=${T:-2} OT=${OT:-40} OI=${OI:-0.25} WS=${WS:-64M} OT_WS=${OT_WS:-2G} CACHE=${CACHE:-1G}
	SIZES=${SIZES:-"4K 16K 64K 256K 1M"} DEPTHS=${DEPTHS:-"1 2 4 8 16 32 64"}
	TDEPTHS=${TDEPTHS:-"1 2 4 8 16 32"} THREADS=${THREADS:-"1 2"}
fi
FIGS=${FIGS:-sweeps threads overtime}
want() { [[ " $FIGS " == *" $1 "* ]]; }
mkdir -p "$RES" || exit 1
want sweeps && rm -f "$RES"/{blocksize,depth}.jsonl
want threads && rm -f "$RES"/threads.jsonl
want overtime && rm -f "$RES"/overtime.jsonl

bytes() {   # 64M -> 67108864
	case $1 in
	*K) echo $(( ${1%K} << 10 )) ;; *M) echo $(( ${1%M} << 20 )) ;;
	*G) echo $(( ${1%G} << 30 )) ;; *) echo "$1" ;;
	esac
}
# field NAME JSON: a number from bench-xseg's one-line JSON (no python per point)
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<< "$2"; }

# bench FILE LABEL THREADS OP BS DEPTH WS [bench-xseg options...]: one
# --runtime point appended to FILE (the final JSON line, labelled).
bench() {
	local file=$1 label=$2 threads=$3 op=$4 bs=$5 depth=$6 ws=$7; shift 7
	local out
	out=$("$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" \
		--pattern rand --total-size "$ws" --block-size "$bs" --iodepth "$depth" \
		--object-size 4M --seed 1 --verify none --timeout 60 --json "$@") ||
		{ echo "bench-xseg $op $bs depth $depth ($label) failed:" >&2; echo "$out" | tail -3 >&2; exit 1; }
	echo "$out" | grep '^{' | sed "s/^{/{\"path\":\"$label\",\"threads\":$threads,/" >> "$file"
	local j=${out##*$'\n'}
	printf '  %-9s t%s %-5s bs %5s depth %2s  %9.0f IOPS %7.0f MiB/s  p50 %8.1f p99 %9.1f us\n' \
		"$label" "$threads" "$op" "$bs" "$depth" "$(field iops "$j")" \
		"$(field mib_per_s "$j")" "$(field lat_us_p50 "$j")" "$(field lat_us_p99 "$j")"
}

fill() {   # one plain pass: every block of the working set exists on filed
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write \
		--pattern seq --total-size "$1" --block-size 1M --object-size 4M --seed 1 \
		--verify none --timeout 60 >/dev/null || { echo "fill failed" >&2; exit 1; }
}

cpid=
start_cached() {   # policy threads cache-size
	"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size "$3" \
		--max-objects 4096 --write-policy "$1" --threads "$2" 2> "$DATA.cached.log" & cpid=$!
	pids+=("$cpid")
	wait_bound 2
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null
}
stop_cached() {    # unplug (every dirty byte written back), then stop
	"$BIN/xseg" unplug --segment "$SEG" --via 2 >/dev/null
	kill -TERM "$cpid"; wait "$cpid" 2>/dev/null
	unset 'pids[${#pids[@]}-1]'
	cpid=
}

sweeps() {   # label threads: the block-size and depth sweeps on what port 1 reaches
	local bs d op
	for bs in $SIZES; do for op in write read; do
		bench "$RES/blocksize.jsonl" "$1" "$2" "$op" "$bs" 16 "$WS" --runtime "$T"
	done; done
	for d in $DEPTHS; do for op in write read; do
		bench "$RES/depth.jsonl" "$1" "$2" "$op" 4K "$d" "$WS" --runtime "$T"
	done; done
}

# meta PART start|end: meta.json's common fields, and per part (sweeps,
# threads, overtime) when it ran and the load average around it.
meta() {
	python3 - "$RES/meta.json" "$1" "$2" "${QUICK:-0}" <<EOF
import json, os, subprocess, sys, time, platform
f, part, when, quick = sys.argv[1:]
try: m = json.load(open(f))
except (OSError, ValueError): m = {}
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
p = m.setdefault('parts', {}).setdefault(part, {})
if when == 'start':
    m.update({'cpus': os.cpu_count(), 'kernel': platform.release(),
              'cpu_model': sh("sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1"),
              'tmpdir': os.environ.get('TMPDIR', '/tmp')})
    p.clear()
    p.update({'date': time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()),
              'commit': sh('git rev-parse --short HEAD') + ('+' if sh("git status --porcelain -uno -- . ':!docs/figures'") else ''),
              'quick': quick == '1', 'loadavg_start': os.getloadavg()[0],
              'seconds_per_point': $T, 'working_set': '$WS', 'cache': '$CACHE',
              'overtime_seconds': $OT, 'overtime_interval': $OI,
              'overtime_working_set': '$OT_WS'})
else:
    p['loadavg_end'] = os.getloadavg()[0]
json.dump(m, open(f, 'w'), indent=1, sort_keys=True)
EOF
}

echo "figures: $T s a point, working set $WS; over time $OT s over $OT_WS (cache half); results in $RES"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 2> "$DATA.filed.log" & pids+=($!)
wait_bound 1
fill "$WS"
want overtime && [ "$(bytes "$OT_WS")" -gt "$(bytes "$WS")" ] && fill "$OT_WS"

if want sweeps; then
	meta sweeps start
	echo "== block size and iodepth: filed alone"
	sweeps filed 0
	echo "== block size and iodepth: cached write-back ($CACHE cache, hits), --threads 2"
	start_cached writeback 2 "$CACHE"
	fill "$WS"          # the working set in the cache (dirty): reads are hits
	sweeps cached-wb 2
	stop_cached
	meta sweeps end
fi

if want threads; then
	meta threads start
	echo "== threads x depth: cached write-back hits"
	for t in $THREADS; do
		start_cached writeback "$t" "$CACHE"
		fill "$WS"
		for d in $TDEPTHS; do for op in write read; do
			bench "$RES/threads.jsonl" cached-wb "$t" "$op" 4K "$d" "$WS" --runtime "$T"
		done; done
		stop_cached
	done
	meta threads end
fi

if want overtime; then
	meta overtime start
	echo "== over time: 4K random writes, iodepth 16, $OT s, cache $(( $(bytes "$OT_WS") / 2 >> 20 )) MiB = half of $OT_WS"
	cache=$(( $(bytes "$OT_WS") / 2 ))
	bench "$RES/overtime.jsonl" filed 0 write 4K 16 "$OT_WS" --runtime "$OT" --interval-json "$OI"
	for policy in wb:writeback wt:writethrough; do
		start_cached "${policy#*:}" 2 "$cache"
		bench "$RES/overtime.jsonl" "cached-${policy%%:*}" 2 write 4K 16 "$OT_WS" \
			--runtime "$OT" --interval-json "$OI"
		stop_cached
	done
	meta overtime end
fi
rm -f "$DATA.cached.log" "$DATA.filed.log"
echo "done: bench/plot $RES OUT_DIR"
