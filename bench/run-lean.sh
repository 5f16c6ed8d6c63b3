#!/usr/bin/env bash
# Issue 24's table in one run: the five bench-xseg ratios (4K random,
# depth 16), each the median over ROUNDS rounds, where a round runs the
# two sides of each ratio one right after the other (their order swapped
# every other round, so a drift of the machine hits both sides alike):
#   (a) cached write-back hits, writes / nulld writes        aim >= 0.8
#   (b) cached write-back hits, reads / nulld reads          aim >= 0.8
#   (c) bare hop (nulld --forward 1) writes / filed alone    aim >= 0.9
#   (d) cached write-through writes / bare hop writes        aim >= 0.9
#   (e) cold read misses through cached (a fresh cached each
#       round, over objects filed has) / bare hop reads      aim >= 0.9
# and, with no aim, (a) and (b) against `nulld --copy TOTAL`: the IPC
# limit plus the one copy a hit cannot skip (each request's bytes into or
# out of a random block of TOTAL): what a hit costs beyond moving its data.
# and, where nbdkit is installed, the sixth row: fio's nbd engine (4K
# random, depth 16) through nbdd -> vlmcd -> cached (write-back, hits)
# -> filed against `nbdkit memory` served to the same fio, writes and
# reads (aim >= 0.9). Then the context switches per request of every
# process of each path (medians over the rounds): the client's from its
# rusage, each peer's from the voluntary + nonvoluntary switches of all its
# threads in /proc/PID/task/*/status before and after the run (no root
# needed; a peer's figure includes its idle wake-ups during the run).
# A process's threads that end before the run does are not counted (so
# nbdkit, whose threads are per connection, is left out of that list).
#   ROUNDS (3)  BS (4K)  DEPTH (16)
#   RUNTIME (0.5): seconds a timed run lasts (bench-xseg --runtime, fio
#               --time_based), pass after pass over TOTAL (64M) of blocks
#   COLD_TOTAL (256M): (e)'s two runs, one pass each (a second would hit)
#   PIN (0)     1: bench-xseg and fio on CPU $PIN_CLIENT (0), every peer
#               and nbdkit on CPU $PIN_PEERS (1), with taskset
#   NBD (1)     0 leaves the fio/nbdkit row out
#   CACHED_THREADS (cached's default): every cached's --threads
#   CACHED_ARGS: more options for every cached (e.g. "--watchers 4")
#   CACHED_LANES (1): every cached's --lanes (the caches then move to
#               ports 16 and up, each with a range of its own)
#   TMPDIR (/dev/shm): filed's objects
#   ROUNDS=3 PIN=1 bench/run-lean.sh
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=lean-$$
DATA=$(mktemp -d)
OUT=$DATA/out
mkdir -p "$OUT"
cthreads=(); [ -n "${CACHED_THREADS:-}" ] && cthreads=(--threads "$CACHED_THREADS")
# shellcheck disable=SC2206   # words on purpose: options
[ -n "${CACHED_ARGS:-}" ] && cthreads+=(${CACHED_ARGS})
# The caches' ports (write-back, write-through, cold): with lanes, each
# needs a range of its own, past the others.
LANES=${CACHED_LANES:-1} wbp=2 wtp=5 coldp=6 nports=16
if [ "$LANES" -gt 1 ]; then
	cthreads+=(--lanes "$LANES")
	wbp=16 wtp=$((16 + LANES)) coldp=$((16 + 2 * LANES)) nports=$((16 + 3 * LANES))
fi
ROUNDS=${ROUNDS:-3} TOTAL=${TOTAL:-64M} COLD_TOTAL=${COLD_TOTAL:-256M} RUNTIME=${RUNTIME:-0.5} BS=${BS:-4K} DEPTH=${DEPTH:-16}
PIN=${PIN:-0} PIN_CLIENT=${PIN_CLIENT:-0} PIN_PEERS=${PIN_PEERS:-1} NBD=${NBD:-1}
pids=()
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

if [ "$PIN" = 1 ]; then
	ON_CLIENT=(taskset -c "$PIN_CLIENT") ON_PEERS=(taskset -c "$PIN_PEERS")
	mode="pinned: clients on CPU $PIN_CLIENT, peers on CPU $PIN_PEERS (taskset)"
else
	ON_CLIENT=() ON_PEERS=()
	mode="not pinned"
fi

# Runs a command and writes its context switches (all its threads, from
# wait4's rusage) to $OUT/client_cs.
RUSAGE='import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, st, ru = os.wait4(pid, 0)
open(os.environ["CS_FILE"], "w").write("%d\n" % (ru.ru_nvcsw + ru.ru_nivcsw))
sys.exit(os.waitstatus_to_exitcode(st))'
export CS_FILE=$OUT/client_cs

# alive PROC:PID...: exits (the trap stops the rest) where one has died,
# rather than let every later run wait out its requests' timeout.
alive() {
	local x
	for x in "$@"; do
		kill -0 "${x#*:}" 2>/dev/null ||
			{ echo "${x%%:*} (pid ${x#*:}) has died: stopping" >&2; exit 1; }
	done
}

peer() {   # name program args...: started on the peers' CPU, pid in $pid
	local name=$1; shift
	# --stop-timeout: a cache whose blocker died gives up its write-back soon
	"${ON_PEERS[@]}" "$@" --log-level error --stop-timeout 5 2> "$OUT/$name.log" & pid=$!
	pids+=("$pid")
}

# record NAME ROUND IOPS REQS PROC:PID:CS_BEFORE...: one line in
# $OUT/runs: "name round iops client=cs/req proc=cs/req ...".
record() {
	local name=$1 round=$2 iops=$3 reqs=$4; shift 4
	local line="$name $round $iops client=$(awk -v c="$(cat "$CS_FILE")" -v n="$reqs" 'BEGIN { printf "%.3f", c / n }')"
	local x
	for x in "$@"; do   # proc:pid:before
		IFS=: read -r p id b <<< "$x"
		line+=" $p=$(awk -v a="$(cs_of "$id")" -v b="$b" -v n="$reqs" 'BEGIN { printf "%.3f", (a - b) / n }')"
	done
	echo "$line" >> "$OUT/runs"
}

# xrun NAME ROUND PORT OP SEED PROC:PID...: one bench-xseg run, timed
# (RUNTIME over TOTAL), or one pass over $ONCE bytes where ONCE is set.
xrun() {
	local name=$1 round=$2 port=$3 op=$4 seed=$5; shift 5
	local procs=() x size=(--total-size "$TOTAL" --runtime "$RUNTIME")
	[ -n "${ONCE:-}" ] && size=(--total-size "$ONCE")
	alive "$@"
	for x in "$@"; do procs+=("$x:$(cs_of "${x#*:}")"); done
	"${ON_CLIENT[@]}" python3 -c "$RUSAGE" "$BIN/bench-xseg" --segment "$SEG" --port 10 \
		--target-port "$port" --op "$op" --pattern rand --block-size "$BS" \
		--iodepth "$DEPTH" --object-size 4M --seed "$seed" --timeout 10 --json "${size[@]}" \
		> "$OUT/json" 2> "$OUT/err" ||
		{ echo "$name (round $round): bench-xseg failed: $(tail -1 "$OUT/err")" >&2; return 1; }
	local iops reqs
	iops=$(tail -1 "$OUT/json" | sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p')
	reqs=$(tail -1 "$OUT/json" | sed -n 's/.*"requests": *\([0-9]*\).*/\1/p')
	[ -n "$reqs" ] && [ "$reqs" -gt 0 ] || { echo "$name (round $round): no result" >&2; return 1; }
	record "$name" "$round" "$iops" "$reqs" "${procs[@]}"
}

echo "lean path (issue 24): $BS random, depth $DEPTH, runs of ${RUNTIME}s over $TOTAL (cold misses: one pass over $COLD_TOTAL), $ROUNDS rounds, $mode"
echo "$(date -u '+%F %T UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

"$BIN/xseg" create --segment "$SEG" --ports "$nports" --requests 2048 --heap 512M >/dev/null || exit 1
peer filed "$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2; filed=$pid
peer nulld "$BIN/nulld" --segment "$SEG" --port 3 --threads 2; nulld=$pid
peer hop "$BIN/nulld" --segment "$SEG" --port 4 --forward 1; hop=$pid
peer nulld-copy "$BIN/nulld" --segment "$SEG" --port 11 --threads 2 --copy "$TOTAL"; ncopy=$pid
peer cached-wb "$BIN/cached" "${cthreads[@]}" --segment "$SEG" --port $wbp --blocker-port 1 --cache-size 1G \
	--max-objects 4096 --write-policy writeback; wb=$pid
peer cached-wt "$BIN/cached" "${cthreads[@]}" --segment "$SEG" --port $wtp --blocker-port 1 --cache-size 1G \
	--max-objects 4096 --write-policy writethrough; wt=$pid
for p in 1 $wbp 3 4 11 $wtp; do wait_bound $p; done
npeers=${#pids[@]}

# The first passes: seed 1's blocks into the write-back cache (the hits),
# seed 5's objects into filed (every later write there overwrites: a
# write that grows a file pays the allocation of its pages).
ONCE=$TOTAL xrun fill-wb 0 $wbp write 1 || exit 1
ONCE=$COLD_TOTAL xrun fill-filed 0 1 write 5 || exit 1

pair() {   # round: run $a then $b, or $b then $a on even rounds
	if (( $1 % 2 )); then "${A[@]}"; "${B[@]}"; else "${B[@]}"; "${A[@]}"; fi
}
for r in $(seq "$ROUNDS"); do
	A=(xrun wb-write "$r" $wbp write 1 cached:$wb) B=(xrun nulld-write "$r" 3 write 7 nulld:$nulld); pair "$r"
	A=(xrun wb-read "$r" $wbp read 1 cached:$wb) B=(xrun nulld-read "$r" 3 read 7 nulld:$nulld); pair "$r"
	A=(xrun wb-write2 "$r" $wbp write 1 cached:$wb) B=(xrun copy-write "$r" 11 write 7 nulld:$ncopy); pair "$r"
	A=(xrun wb-read2 "$r" $wbp read 1 cached:$wb) B=(xrun copy-read "$r" 11 read 7 nulld:$ncopy); pair "$r"
	A=(xrun hop-write "$r" 4 write 5 hop:$hop filed:$filed) B=(xrun filed-write "$r" 1 write 5 filed:$filed); pair "$r"
	A=(xrun wt-write "$r" $wtp write 5 cached:$wt filed:$filed) B=(xrun hop-write2 "$r" 4 write 5 hop:$hop filed:$filed); pair "$r"
	# a fresh, empty cache: every read a miss over what filed has (seed 5)
	peer cached-cold "$BIN/cached" "${cthreads[@]}" --segment "$SEG" --port $coldp --blocker-port 1 --cache-size 1G \
		--max-objects 4096 --write-policy writeback; cold=$pid
	wait_bound $coldp
	# one write of another object first: the cold reads then time the
	# misses, not cached's first request (which once waited for the whole
	# cache to fault in; now only for its first 64M)
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port $coldp --op write --pattern seq --prefix warm \
		--total-size "$BS" --block-size "$BS" >/dev/null 2>&1 || echo "round $r: the warm-up write failed" >&2
	ONCE=$COLD_TOTAL
	A=(xrun cold-read "$r" $coldp read 5 cached:$cold filed:$filed) B=(xrun hop-read "$r" 4 read 5 hop:$hop filed:$filed); pair "$r"
	unset ONCE
	kill -TERM "$cold"; wait "$cold" 2>/dev/null
	pids=("${pids[@]:0:npeers}")
done

# The sixth row: fio's nbd engine against nbdd's path and nbdkit's RAM disk.
NBD_ROW=
if [ "$NBD" = 0 ]; then
	echo "fio/nbdkit row: left out (NBD=0)"
elif ! command -v nbdkit >/dev/null; then
	echo "fio/nbdkit row: skipped, nbdkit is not installed (tools/install-deps)"
elif ! { command -v fio >/dev/null && fio --enghelp 2>/dev/null | grep -qw nbd; }; then
	echo "fio/nbdkit row: skipped, fio lacks the nbd engine (tools/install-deps)"
else
	NBD_ROW=1
	SOCK=$DATA/nbdd.sock KSOCK=$DATA/nbdkit.sock
	peer cached-nbd "$BIN/cached" "${cthreads[@]}" --segment "$SEG" --port 7 --blocker-port 1 --cache-size 1G \
		--max-objects 4096 --write-policy writeback; cnbd=$pid
	wait_bound 7
	peer vlmcd "$BIN/vlmcd" --segment "$SEG" --port 8 --blocker-port 7 --volume "vol:$TOTAL"; vlmcd=$pid
	wait_bound 8
	peer nbdd "$BIN/nbdd" --segment "$SEG" --port 9 --target-port 8 --unix "$SOCK"; nbdd=$pid
	"${ON_PEERS[@]}" nbdkit --foreground --unix "$KSOCK" memory "size=$TOTAL" \
		2> "$OUT/nbdkit.log" & nbdkit=$!
	pids+=("$nbdkit")
	for _ in $(seq 100); do [ -S "$SOCK" ] && [ -S "$KSOCK" ] && break; sleep 0.05; done
	# frun NAME ROUND URI RW PROC:PID...: one fio run.
	frun() {
		local name=$1 round=$2 uri=$3 rw=$4; shift 4
		local procs=() x timed=(--time_based --runtime="$(awk -v r="$RUNTIME" 'BEGIN { printf "%dms", r * 1000 }')")
		[ -n "${ONCE:-}" ] && timed=()
		alive "$@"
		for x in "$@"; do procs+=("$x:$(cs_of "${x#*:}")"); done
		"${ON_CLIENT[@]}" python3 -c "$RUSAGE" fio --name=lean --ioengine=nbd --uri="$uri" \
			--rw="$rw" --bs="$BS" --iodepth="$DEPTH" --size="$TOTAL" "${timed[@]}" --output-format=json \
			> "$OUT/fio.json" 2> "$OUT/fio.err" ||
			{ echo "$name (round $round): fio failed: $(tail -1 "$OUT/fio.err")" >&2; return 1; }
		local res
		# fio's nbd engine prints a line before the JSON
		res=$(python3 -c "
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.index('{'):])['jobs'][0]
s = d['write' if sys.argv[2] == 'randwrite' else 'read']
assert d['error'] == 0
print('%.0f %d' % (s['iops'], s['total_ios']))" "$OUT/fio.json" "$rw") ||
			{ echo "$name (round $round): no result" >&2; return 1; }
		record "$name" "$round" ${res} "${procs[@]}"
	}
	U_NBDD="nbd+unix:///vol?socket=$SOCK" U_KIT="nbd+unix:///?socket=$KSOCK"
	# first passes: every block of the volume written (cached then holds it)
	ONCE=1 frun fill-nbdd 0 "$U_NBDD" randwrite || exit 1
	ONCE=1 frun fill-nbdkit 0 "$U_KIT" randwrite || exit 1
	for r in $(seq "$ROUNDS"); do
		A=(frun nbdd-write "$r" "$U_NBDD" randwrite nbdd:$nbdd vlmcd:$vlmcd cached:$cnbd)
		B=(frun nbdkit-write "$r" "$U_KIT" randwrite); pair "$r"
		A=(frun nbdd-read "$r" "$U_NBDD" randread nbdd:$nbdd vlmcd:$vlmcd cached:$cnbd)
		B=(frun nbdkit-read "$r" "$U_KIT" randread); pair "$r"
	done
fi

python3 - "$OUT/runs" "$ROUNDS" "$NBD_ROW" <<'EOF'
import sys, statistics
runs = {}   # name -> round -> (iops, {proc: cs/req})
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], {})[int(f[1])] = (float(f[2]), {k: float(v) for k, v in (x.split('=') for x in f[3:])})
rounds = int(sys.argv[2])
def med(xs): return statistics.median(xs) if xs else None
def row(label, a, b, aim):
    rs = [runs[a][r][0] / runs[b][r][0] for r in range(1, rounds + 1)
          if r in runs.get(a, {}) and r in runs.get(b, {})]
    if not rs:
        print(f"{label:44} n/a (runs failed)"); return
    m = med(rs)
    ia = med([runs[a][r][0] for r in runs[a] if r > 0]); ib = med([runs[b][r][0] for r in runs[b] if r > 0])
    verdict = f"aim {aim}  {'met' if m >= aim else 'NOT met'}" if aim else "(no aim)"
    print(f"{label:44} {m:5.2f}  (rounds {' '.join('%.2f' % x for x in rs)}; "
          f"{ia/1000:.0f}K / {ib/1000:.0f}K IOPS)  {verdict}")
print("ratio, median of the rounds:")
row("(a) cached WB hits writes / nulld", 'wb-write', 'nulld-write', 0.8)
row("(b) cached hits reads / nulld", 'wb-read', 'nulld-read', 0.8)
row("(c) bare hop writes / filed alone", 'hop-write', 'filed-write', 0.9)
row("(d) cached write-through writes / bare hop", 'wt-write', 'hop-write2', 0.9)
row("(e) cold read misses via cached / bare hop", 'cold-read', 'hop-read', 0.9)
if sys.argv[3]:
    row("(f) fio nbd: nbdd->vlmcd->cached / nbdkit, W", 'nbdd-write', 'nbdkit-write', 0.9)
    row("(f) fio nbd: nbdd->vlmcd->cached / nbdkit, R", 'nbdd-read', 'nbdkit-read', 0.9)
print("the copy's share: (a) and (b) against nulld --copy (the IPC limit plus the copy):")
row("(a') cached WB hits writes / nulld --copy", 'wb-write2', 'copy-write', None)
row("(b') cached hits reads / nulld --copy", 'wb-read2', 'copy-read', None)
print("context switches per request, median of the rounds (client = bench-xseg or fio):")
for name in runs:
    rs = [runs[name][r] for r in runs[name] if r > 0]
    if not rs:
        continue
    procs = rs[0][1].keys()
    print(f"  {name:13} " + "  ".join(f"{p} {med([x[1][p] for x in rs]):.2f}" for p in procs))
EOF
