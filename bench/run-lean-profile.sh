#!/usr/bin/env bash
# Where the lean path's time goes (issue 24), with perf: the set-up of
# run-lean.sh (filed 2 workers, nulld 2, a bare hop, cached write-back and
# write-through), then for each CASE a bench-xseg run (4K random, depth 16)
# with `perf record -a` over its middle SECONDS: the run's IOPS, the
# share of samples per thread (PEER-wN: which workers work, which spin)
# and the hottest symbols per thread. Needs perf (linux-perf; on a machine
# without it, bench/pack-nbd-tools.sh packs this machine's and
# bench/with-nbd-tools.sh runs with it) and root or perf_event_paranoid
# <= 0 for -a.
#   CASES ("nulld-read wb-read wb-write wt-write hop-write cold-read")
#   SECONDS_ (2): the profiled part of each run (the run lasts 2 more)
#   TOP (30): symbol lines per case   CACHED_ARGS: more options for cached
#   BIN=$PWD/build-static/bin bench/run-lean-profile.sh
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=lean-profile-$$
DATA=$(mktemp -d)
CASES=${CASES:-"nulld-read wb-read wb-write wt-write hop-write cold-read"}
SECS=${SECONDS_:-2} TOP=${TOP:-30}
# shellcheck disable=SC2206   # words on purpose: options
cargs=(${CACHED_ARGS:-})
pids=()
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
command -v perf > /dev/null || { echo "perf is missing (linux-perf, or bench/with-nbd-tools.sh)" >&2; exit 1; }

peer() {   # program args...: started, pid in $pid
	"$@" --log-level error --stop-timeout 5 2>> "$DATA/peers.log" & pid=$!
	pids+=("$pid")
}
bx() {   # bench-xseg args...: prints the run's IOPS
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --pattern rand --block-size 4K --iodepth 16 \
		--object-size 4M --timeout 10 --json "$@" 2> "$DATA/bx.err" |
		tail -1 | sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p'
}
report() {   # DATA_FILE: samples per thread, then the hottest symbols
	perf report -i "$1" --stdio --no-children --sort comm -q < /dev/null 2>/dev/null | head -12
	perf report -i "$1" --stdio --no-children --sort comm,sym -q --percent-limit 0.5 \
		< /dev/null 2>/dev/null | head -"$TOP"
}

echo "lean path profile: $(nproc) CPUs, $(date -u '+%F %T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M > /dev/null || exit 1
peer "$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2
peer "$BIN/nulld" --segment "$SEG" --port 3 --threads 2
peer "$BIN/nulld" --segment "$SEG" --port 4 --forward 1
peer "$BIN/cached" "${cargs[@]}" --segment "$SEG" --port 2 --blocker-port 1 --cache-size 1G \
	--max-objects 4096 --write-policy writeback
peer "$BIN/cached" "${cargs[@]}" --segment "$SEG" --port 5 --blocker-port 1 --cache-size 1G \
	--max-objects 4096 --write-policy writethrough
for p in 1 2 3 4 5; do wait_bound $p; done
# the hits (seed 1 in the write-back cache), filed's objects (seed 5)
bx --target-port 2 --op write --seed 1 --total-size 64M > /dev/null
bx --target-port 1 --op write --seed 5 --total-size 256M > /dev/null

for c in $CASES; do
	case $c in
	nulld-read) args=(--target-port 3 --op read --seed 7 --total-size 64M) ;;
	wb-read) args=(--target-port 2 --op read --seed 1 --total-size 64M) ;;
	wb-write) args=(--target-port 2 --op write --seed 1 --total-size 64M) ;;
	wt-write) args=(--target-port 5 --op write --seed 5 --total-size 64M) ;;
	hop-write) args=(--target-port 4 --op write --seed 5 --total-size 64M) ;;
	cold-read)
		# a fresh cache, one pass over filed's objects, profiled whole
		peer "$BIN/cached" "${cargs[@]}" --segment "$SEG" --port 6 --blocker-port 1 \
			--cache-size 1G --max-objects 4096 --write-policy writeback
		wait_bound 6
		"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 6 --op write --pattern seq \
			--prefix warm --total-size 4K --block-size 4K > /dev/null 2>&1
		iops=$(perf record -a -F 499 -o "$DATA/perf.data" -- "$BIN/bench-xseg" --segment "$SEG" \
			--port 10 --target-port 6 --op read --pattern rand --block-size 4K --iodepth 16 \
			--object-size 4M --seed 5 --total-size 256M --json 2> /dev/null |
			tail -1 | sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p')
		echo "=== cold-read: ${iops:-?} IOPS (one pass over 256M, all of it profiled)"
		report "$DATA/perf.data"
		continue ;;
	*) echo "unknown case '$c' (CASES: nulld-read wb-read wb-write wt-write hop-write cold-read)" >&2; exit 2 ;;
	esac
	bx "${args[@]}" --runtime $((SECS + 2)) > "$DATA/iops" &
	b=$!
	sleep 1
	perf record -a -F 499 -o "$DATA/perf.data" -- sleep "$SECS" > /dev/null 2>&1 < /dev/null
	wait $b
	echo "=== $c: $(cat "$DATA/iops") IOPS (perf over ${SECS} s of its $((SECS + 2)))"
	report "$DATA/perf.data"
done
