#!/usr/bin/env bash
# The thesis's fio job (§7.5: bs=4k, iodepth=16, randwrite then randread)
# through nbdd, fio's nbd engine over the Unix socket:
#   nbdd -> vlmcd -> cached -> filed     and     nbdd -> vlmcd -> filed
# with CEPH=1 the same two with sosd on a throw-away micro-Ceph (memstore)
# instead of filed, and for reference qemu-nbd serving a raw file
# (QEMU_NBD= leaves it out).
# filed keeps its data under $TMPDIR (tmpfs by default). Knobs: SIZE (the
# volume and the amount written, 256M), CACHE (cached's size, 512M),
# RUNS (runs per configuration; the median is printed, 3).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SIZE=${SIZE:-256M} CACHE=${CACHE:-512M} RUNS=${RUNS:-3}
SEG=nbdd-bench-$$
DATA=$(mktemp -d)
SOCK=$DATA/nbd.sock
pids=()
stop_path() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null; wait "${pids[i]}" 2>/dev/null
	done
	pids=()
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DATA/objects" "$DATA/objects.raw" "$SOCK"
}
trap 'stop_path; [ -n "${CONF:-}" ] && tools/micro-ceph stop "$DATA/ceph" > /dev/null 2>&1; rm -rf "$DATA"' EXIT
trap 'exit 130' INT TERM
command -v fio > /dev/null || { echo "fio is missing: run tools/install-deps" >&2; exit 1; }

. bench/bench_lib.sh

CONF=
if [ "${CEPH:-0}" = 1 ]; then
	mkdir -p "$DATA/ceph"
	CONF=$(WATCH_PID=$$ tools/micro-ceph start "$DATA/ceph" | tail -1)
	[ -f "$CONF" ] || { echo "micro-ceph did not start (tools/install-deps --ceph)" >&2; exit 1; }
fi

start_path() {   # $1: cached | direct | sosd-cached | sosd-direct | qemu-nbd
	if [ "$1" = qemu-nbd ]; then   # reference: a raw file on $TMPDIR, no path
		truncate -s "$SIZE" "$DATA/objects.raw"
		qemu-nbd --socket="$SOCK" --format=raw --export-name=vol --cache=writeback \
			--persistent --shared=4 "$DATA/objects.raw" & pids+=($!)
		for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
		return
	fi
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
	if [[ $1 == sosd-* ]]; then
		"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" & pids+=($!)
	else
		"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2 & pids+=($!)
	fi
	wait_bound 1
	local next=1
	if [[ $1 == *cached ]]; then
		"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size "$CACHE" & pids+=($!)
		wait_bound 3
		next=3
	fi
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port $next --volume vol:$SIZE & pids+=($!)
	wait_bound 2
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$SOCK" & pids+=($!)
	for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
}

# One fio run; prints "IOPS p50_us p99_us".
job() {   # $1: randwrite | randread
	fio --name=thesis --ioengine=nbd --uri="nbd+unix:///vol?socket=$SOCK" --rw=$1 --bs=4k \
		--iodepth=16 --size=$SIZE --output-format=json 2>/dev/null |
	python3 -c "
import json, sys
text = sys.stdin.read()   # fio's nbd engine prints a line before the JSON
d = json.loads(text[text.index('{'):])['jobs'][0]
s = d['write' if '$1' == 'randwrite' else 'read']
p = s['clat_ns']['percentile']
assert d['error'] == 0
print('%.0f %.1f %.1f' % (s['iops'], p['50.000000'] / 1e3, p['99.000000'] / 1e3))"
}

median() { sort -n -k1 | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'; }

echo "# fio nbd engine, bs=4k iodepth=16, $SIZE, median of $RUNS runs (IOPS p50_us p99_us)"
paths="cached direct"
[ -n "$CONF" ] && paths="$paths sosd-cached sosd-direct"
for path in $paths ${QEMU_NBD-qemu-nbd}; do
	w=() r=()
	for run in $(seq "$RUNS"); do
		start_path $path
		w+=("$(job randwrite)")
		r+=("$(job randread)")
		stop_path
	done
	printf '%s\n' "${w[@]}" | median | awk -v p=$path '{ printf "%-11s randwrite %8d IOPS  p50 %7.1f us  p99 %8.1f us\n", p, $1, $2, $3 }'
	printf '%s\n' "${r[@]}" | median | awk -v p=$path '{ printf "%-11s randread  %8d IOPS  p50 %7.1f us  p99 %8.1f us\n", p, $1, $2, $3 }'
done
