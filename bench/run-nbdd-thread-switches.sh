#!/usr/bin/env bash
# Which of nbdd's (and vlmcd's) threads switch, per NBD command (issue 24:
# under 0.2 per request in every process): one fio client (nbd engine,
# Unix socket, 4K random at depth 16) through nbdd -> vlmcd -> cached
# (write-back, hits) -> filed, the voluntary and involuntary context
# switches of each thread (/proc/PID/task/*/status) over each run, per
# command; threads under 0.01 a command are left out.
# Knobs: BIN, NBDD (the nbdd binary, default $BIN/nbdd), NBDD_ARGS,
# CACHED_ARGS, RUNTIME (seconds per run, 3). Data under $TMPDIR (tmpfs).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
NBDD=${NBDD:-$BIN/nbdd} RUNTIME=${RUNTIME:-3}
SEG=nbdd-switches-$$
DATA=$(mktemp -d)
pids=()
. bench/bench_lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
command -v fio > /dev/null || { echo "fio is missing: run tools/install-deps" >&2; exit 1; }

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M > /dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2 & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 256M \
	--write-policy writeback ${CACHED_ARGS:-} & pids+=($!)
wait_bound 3
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:64M & pids+=($!)
vlmcd=$!
wait_bound 2
"$NBDD" --segment "$SEG" --port 4 --target-port 2 --unix "$DATA/s" ${NBDD_ARGS:-} & pids+=($!)
nbdd=$!
for _ in $(seq 200); do [ -S "$DATA/s" ] && break; sleep 0.05; done
uri="nbd+unix:///vol?socket=$DATA/s"
fio --name=fill --ioengine=nbd --uri="$uri" --size=64M --rw=write --bs=1M --iodepth=4 \
	> /dev/null 2>&1 || { echo "fio could not fill the volume" >&2; exit 1; }

# "THREAD VOLUNTARY INVOLUNTARY" for every thread of nbdd and vlmcd
snapshot() {
	local p t
	for p in $nbdd $vlmcd; do
		for t in /proc/$p/task/*; do
			echo "$(cat "$t/comm") $(awk '/^voluntary/ { v = $2 } /^nonvoluntary/ { n = $2 }
				END { print v, n }' "$t/status")"
		done
	done
}

echo "# nbdd ${NBDD_ARGS:-}: context switches per command, voluntary / involuntary; $(uptime | sed 's/.*load/load/')"
for rw in randwrite randread; do
	snapshot > "$DATA/before"
	iops=$(fio --name=f --ioengine=nbd --uri="$uri" --size=64M --rw=$rw --bs=4k --iodepth=16 \
		--time_based --runtime="$RUNTIME" --output-format=json 2>/dev/null | python3 -c "
import json, sys
text = sys.stdin.read()   # fio's nbd engine prints a line before the JSON
d = json.loads(text[text.index('{'):])['jobs'][0]
print('%.0f' % d['read' if '$rw' == 'randread' else 'write']['iops'])") || exit 1
	snapshot > "$DATA/after"
	echo "$rw: $iops IOPS"
	paste "$DATA/before" "$DATA/after" | awk -v n=$((iops * RUNTIME)) '{
		v = $5 - $2; i = $6 - $3
		if (v + i > n / 100) printf "  %-12s %.3f / %.3f\n", $1, v / n, i / n }'
done
