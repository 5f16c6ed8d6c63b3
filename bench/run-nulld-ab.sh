#!/usr/bin/env bash
# Two nulld builds against each other with ipc-bench, in pairs whose order
# alternates (A B, B A, ...): on a shared machine the rate swings more from
# one run to the next than two builds differ, so only B/A within a pair
# means anything. Each run starts nulld (and for FWD=1 a second one on
# port 4 with --forward 1, the hop measured), runs ipc-bench for 2 s and
# stops them. Prints each cell's rates and the median of B/A.
#   A, B     nulld binaries (A: the older, B defaults to build/bin/nulld)
#   ROUNDS (7)  CELLS ("1,0 16,0 1,1 16,1": iodepth,forward)
#   CPU=1    instead of the rate, the nulld processes' CPU time (user +
#            system, /proc/PID/stat) per round trip in ns, for
#            REQUESTS (200000) round trips, nulld with --threads 1
#            --spin-us 0 (no spinning to count): on a machine too busy
#            for rates to mean anything, what a build adds per request
#            still shows (B/A > 1: B costs more).
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
A=${A:?A=path of the older nulld}
B=${B:-$BIN/nulld}
ROUNDS=${ROUNDS:-7}
SEG=nulld-ab-$$
DATA=
pids=()
trap bench_cleanup EXIT
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 32M >/dev/null || exit 1

NULLD_OPTS=() RUN=(--seconds 2)
if [ "${CPU:-0}" = 1 ]; then NULLD_OPTS=(--threads 1 --spin-us 0) RUN=(--requests "${REQUESTS:-200000}"); fi

# CPU ticks (user + system) of the processes in $pids.
ticks() {
	local t=0 p f
	for p in "${pids[@]}"; do
		f=($(sed 's/.*) //' "/proc/$p/stat")); t=$((t + f[11] + f[12]))
	done
	echo $t
}

one() {   # binary depth forward: prints the rate (CPU=1: ns of CPU per round trip)
	local target=1 t0 rps
	pids=()
	"$1" --segment "$SEG" --port 1 "${NULLD_OPTS[@]}" 2>/dev/null & pids+=($!)
	if [ "$3" = 1 ]; then
		"$1" --segment "$SEG" --port 4 --forward 1 "${NULLD_OPTS[@]}" 2>/dev/null & pids+=($!)
		target=4
	fi
	wait_bound "$target"
	t0=$(ticks)
	rps=$("$BIN/ipc-bench" --segment "$SEG" --port 8 --target-port "$target" --iodepth "$2" \
		"${RUN[@]}" --json | tail -1 |
		python3 -c 'import json, sys; print(int(json.load(sys.stdin)["rps"]))')
	if [ "${CPU:-0}" = 1 ]; then
		echo $(( ($(ticks) - t0) * (1000000000 / $(getconf CLK_TCK)) / ${REQUESTS:-200000} ))
	else
		echo "$rps"
	fi
	stop_peers
	pids=()
}

for cell in ${CELLS:-1,0 16,0 1,1 16,1}; do
	set -- ${cell/,/ }
	a=(); b=()
	for r in $(seq "$ROUNDS"); do
		if [ $((r % 2)) = 1 ]; then a+=($(one "$A" "$1" "$2")); b+=($(one "$B" "$1" "$2"))
		else b+=($(one "$B" "$1" "$2")); a+=($(one "$A" "$1" "$2")); fi
	done
	python3 - "$1" "$2" "${a[*]}" "${b[*]}" <<'PY'
import statistics as st, sys
d, f = sys.argv[1], sys.argv[2]
a, b = [list(map(int, x.split())) for x in sys.argv[3:5]]
r = [y / x for x, y in zip(a, b)]
print(f"iodepth {d} forward {f}: A {a} (median {st.median(a):.0f})  B {b} "
      f"(median {st.median(b):.0f})  B/A per pair: median {st.median(r):.3f} "
      f"(min {min(r):.3f}, max {max(r):.3f})")
PY
done
