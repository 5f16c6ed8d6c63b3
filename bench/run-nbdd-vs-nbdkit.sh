#!/usr/bin/env bash
# nbdd against a RAM disk served the same way (issue 24): fio's nbd engine
# over a Unix socket, 4K random writes then reads at depth 16, to
#   nbdd -> vlmcd -> cached (write-back, every block written first: hits)
#   -> filed,   and   `nbdkit memory`
# in alternating rounds; prints each run and the medians, with the ratio to
# nbdkit, and the CPU time the server's processes (the four peers, or
# nbdkit) spent per op (the peers spin when idle: it falls as IOPS rise),
# and the context switches per op of nbdd (issue 24: aim under 0.2).
# Knobs: NBDD (nbdd binaries to compare, space-separated, e.g.
# "/tmp/nbdd.orig build/bin/nbdd"; default $BIN/nbdd), ROUNDS (3), RUNTIME
# (seconds per fio run, 5), SIZE (volume and RAM disk, 64M), CACHE
# (cached's size, 256M), DEPTH (16), BLOCKER (cached; nulld: vlmcd's blocker
# is nulld instead of cached and filed, so what is left is nbdd and
# vlmcd's own cost), JOBS (fio jobs, one connection each, 1; IOPS are
# their sum), NBDD_ARGS, VLMCD_ARGS, CACHED_ARGS (more options for
# those peers, e.g. "--threads 4"), LANES (1; N > 1: vlmcd, cached and
# nbdd each bind N lanes, nbdd's socket threads each submitting from one
# of its own). filed keeps its data under $TMPDIR (tmpfs by default).
# Skips (exit 0) with a message when nbdkit is missing.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
NBDD=${NBDD:-$BIN/nbdd} ROUNDS=${ROUNDS:-3} RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-64M} CACHE=${CACHE:-256M} DEPTH=${DEPTH:-16} BLOCKER=${BLOCKER:-cached}
JOBS=${JOBS:-1} LANES=${LANES:-1}
# Ports: filed 1, then vlmcd, cached (or nulld) and nbdd, LANES each.
VPORT=2 CPORT=$((2 + LANES)) NPORT=$((2 + 2 * LANES)) LANE_OPT=()
[ "$LANES" -gt 1 ] && LANE_OPT=(--lanes "$LANES")
SEG=nbdd-vs-nbdkit-$$
DATA=$(mktemp -d)
SOCK=$DATA/nbd.sock
pids=()
. bench/bench_lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
command -v fio > /dev/null || { echo "fio is missing: run tools/install-deps" >&2; exit 1; }
command -v nbdkit > /dev/null || { echo "nbdkit is missing (tools/install-deps): skipped"; exit 0; }

wait_sock() { for _ in $(seq 200); do [ -S "$SOCK" ] && return; sleep 0.05; done; exit 1; }

# filed, cached (write-back) and vlmcd on a fresh segment (BLOCKER=nulld:
# nulld where cached is).
start_path() {
	"$BIN/xseg" create --segment "$SEG" --ports $((NPORT + LANES > 16 ? NPORT + LANES : 16)) --requests 2048 --heap 512M >/dev/null || exit 1
	if [ "$BLOCKER" = nulld ]; then
		"$BIN/nulld" --segment "$SEG" --port $CPORT "${LANE_OPT[@]}" & pids+=($!)
	else
		"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2 & pids+=($!)
		wait_bound 1
		"$BIN/cached" --segment "$SEG" --port $CPORT --blocker-port 1 --cache-size "$CACHE" \
			--write-policy writeback "${LANE_OPT[@]}" ${CACHED_ARGS:-} & pids+=($!)
	fi
	wait_bound $CPORT
	"$BIN/vlmcd" --segment "$SEG" --port $VPORT --blocker-port $CPORT --volume vol:$SIZE \
		"${LANE_OPT[@]}" ${VLMCD_ARGS:-} & pids+=($!)
	wait_bound $VPORT
}

stop_all() {
	stop_peers
	pids=()
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DATA/objects" "$SOCK"
}

# One fio run on $SOCK; prints IOPS.
job() {   # $1: write (fill) | randwrite | randread
	local opts=(--rw=$1 --bs=4k --iodepth=$DEPTH --time_based --runtime=$RUNTIME
		--numjobs=$JOBS --group_reporting)
	[ "$1" = write ] && opts=(--rw=write --bs=1M --iodepth=4)
	fio --name=nbd --ioengine=nbd --uri="nbd+unix:///vol?socket=$SOCK" --size=$SIZE \
		"${opts[@]}" --output-format=json 2>/dev/null |
	python3 -c "
import json, sys
text = sys.stdin.read()   # fio's nbd engine prints a line before the JSON
d = json.loads(text[text.index('{'):])['jobs'][0]
assert d['error'] == 0
print('%.0f' % d['read' if '$1' == 'randread' else 'write']['iops'])"
}

# CPU ticks (user + system) the processes $@ used so far.
ticks() { local t=0 p; for p; do t=$((t + $(awk '{ print $14 + $15 }' /proc/$p/stat))); done; echo $t; }

# One measured run: "IOPS CPU-us-per-op CS-per-op": the CPU of the
# server's processes ($srv), the context switches of its front ($front:
# nbdd, or nbdkit, whose per-connection threads end before they are read,
# so its figure is low).
measured() {   # $1: randwrite | randread
	local t0 c0 iops
	t0=$(ticks $srv) c0=$(cs_of $front)
	iops=$(job $1) || return 1
	awk -v i="$iops" -v t=$(( $(ticks $srv) - t0 )) -v hz=$(getconf CLK_TCK) -v s=$RUNTIME \
		-v c=$(( $(cs_of $front) - c0 )) \
		'BEGIN { printf "%d %.1f %.2f\n", i, t / hz * 1e6 / (i * s), c / (i * s) }'
}

# Fill, then the two measured runs; appends to $RES/NAME.{w,r}.
measure() {   # $1: name
	job write > /dev/null || exit 1
	local w r
	w=$(measured randwrite) r=$(measured randread)
	[ -n "$w" ] && [ -n "$r" ] || { echo "fio failed on $1" >&2; exit 1; }
	echo "$w" >> "$RES/$1.w"; echo "$r" >> "$RES/$1.r"
	set -- "$1" $w $r
	printf '  %-24s randwrite %7d (%5.1f us CPU/op, %.2f cs/op)  randread %7d (%5.1f us CPU/op, %.2f cs/op)\n' "$@"
}

RES=$DATA/results
mkdir -p "$RES"
names=()
echo "# fio nbd engine, unix socket, bs=4k iodepth=$DEPTH, $JOBS job(s), $LANES lane(s), ${RUNTIME}s each, $SIZE, vlmcd's blocker $BLOCKER; $(uptime | sed 's/.*load/load/')"
for round in $(seq "$ROUNDS"); do
	echo "round $round"
	k=0
	for nbdd in $NBDD; do
		k=$((k + 1))
		name="nbdd$k:$(basename "$nbdd")"
		[ "$round" = 1 ] && names+=("$name")
		start_path
		"$nbdd" --segment "$SEG" --port $NPORT --target-port $VPORT --unix "$SOCK" \
			"${LANE_OPT[@]}" ${NBDD_ARGS:-} & pids+=($!)
		wait_sock
		srv="${pids[*]}" front=${pids[-1]}
		measure "$name"
		stop_all
	done
	nbdkit --exit-with-parent -f -U "$SOCK" -e vol memory "$SIZE" & pids+=($!)
	wait_sock
	srv="${pids[*]}" front=${pids[-1]}
	measure nbdkit
	stop_all
done
[ "$round" ] && names+=(nbdkit)

median() { sort -n -k$1 | awk -v k=$1 '{ a[NR] = $k } END { print a[int((NR + 1) / 2)] }'; }
kw=$(median 1 < "$RES/nbdkit.w") kr=$(median 1 < "$RES/nbdkit.r")
echo "# medians: IOPS (ratio to nbdkit memory), CPU us per op of the server's processes, context switches per op of the front (nbdd; nbdkit's undercounted)"
for n in "${names[@]}"; do
	awk -v n="$n" -v kw="$kw" -v kr="$kr" -v w="$(median 1 < "$RES/$n.w")" \
		-v r="$(median 1 < "$RES/$n.r")" -v cw="$(median 2 < "$RES/$n.w")" \
		-v cr="$(median 2 < "$RES/$n.r")" -v sw="$(median 3 < "$RES/$n.w")" \
		-v sr="$(median 3 < "$RES/$n.r")" 'BEGIN {
		printf "%-24s randwrite %7d (%.2fx, %5.1f us, %.2f cs)  randread %7d (%.2fx, %5.1f us, %.2f cs)\n",
			n, w, w / kw, cw, sw, r, r / kr, cr, sr }'
done
