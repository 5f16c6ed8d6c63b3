#!/usr/bin/env bash
# The runtime's --yield (docs/peers.md) on and off in one run: a bare hop
# (nulld --forward) and cached write-through in front of filed, cached
# write-back hits, each started twice, with --yield auto and with --yield
# never, on one segment, and driven in turn by bench-xseg (4K random, depth
# 16) for RUNTIME seconds a run, ROUNDS rounds. Prints, per row, the median
# over the rounds of the ratio within each round (filed alone, or nulld,
# the reference), for never and auto, and the median IOPS; then the
# cpu_yields each peer reported.
#   ROUNDS (7)  RUNTIME (0.7)  TOTAL (64M)  DEPTH (16)  TMPDIR (/dev/shm)
#   ROUNDS=7 bench/run-yield-ab.sh
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEG=yield-$$
DATA=$(mktemp -d)
ROUNDS=${ROUNDS:-7} RUNTIME=${RUNTIME:-0.7} TOTAL=${TOTAL:-64M} DEPTH=${DEPTH:-16}
pids=()
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

echo "--yield never vs auto: 4K random, depth $DEPTH, ${RUNTIME}s runs over $TOTAL, $ROUNDS rounds"
echo "$(date -u '+%F %T UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
peer() {   # port program args...
	local port=$1; shift
	"$@" --segment "$SEG" --port "$port" --log-level error --stop-timeout 5 \
		2>> "$DATA/peers.log" &
	pids+=($!)
	wait_bound "$port"
}
peer 1 "$BIN/filed" --dir "$DATA/objects" --threads 2
peer 2 "$BIN/nulld" --threads 2
# never on the even ports, auto on the odd ones
for y in never auto; do
	o=$([ $y = never ] && echo 0 || echo 1)
	peer $((4 + o)) "$BIN/nulld" --forward 1 --yield $y
	peer $((6 + o)) "$BIN/cached" --blocker-port 1 --cache-size 256M --max-objects 4096 \
		--write-policy writethrough --yield $y
	peer $((8 + o)) "$BIN/cached" --blocker-port 1 --cache-size 256M --max-objects 4096 \
		--write-policy writeback --yield $y
done

run() {   # port op seed [once]: prints the IOPS
	local size=(--total-size "$TOTAL" --runtime "$RUNTIME")
	[ $# = 4 ] && size=(--total-size "$TOTAL")
	"$BIN/bench-xseg" --segment "$SEG" --port 12 --target-port "$1" --op "$2" --pattern rand \
		--block-size 4K --iodepth "$DEPTH" --object-size 4M --seed "$3" --timeout 10 --json \
		"${size[@]}" | tail -1 | sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p'
}
# filed's objects written once (later writes overwrite), the hits loaded
run 1 write 5 once >/dev/null && run 8 write 1 once >/dev/null && run 9 write 1 once >/dev/null ||
	{ echo "the first passes failed" >&2; exit 1; }
for r in $(seq "$ROUNDS"); do
	line=""
	for x in "1 write 5" "4 write 5" "5 write 5" "6 write 5" "7 write 5" \
		 "2 write 7" "8 write 1" "9 write 1" "1 read 5" "4 read 5" "5 read 5"; do
		v=$(run $x)
		[ -n "$v" ] || { echo "round $r: bench-xseg to port ${x%% *} failed" >&2; exit 1; }
		line+="$v "
	done
	echo "$line"
done > "$DATA/runs"
python3 - "$DATA/runs" <<'EOF'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def med(f): return st.median(f(r) for r in rows)
def row(label, ref, never, auto):
    print(f"{label:38} never {med(lambda r: r[never] / r[ref]):.2f}  auto {med(lambda r: r[auto] / r[ref]):.2f}"
          f"   ({med(lambda r: r[never]) / 1000:.0f}K / {med(lambda r: r[auto]) / 1000:.0f}K IOPS;"
          f" reference {med(lambda r: r[ref]) / 1000:.0f}K)")
print(f"median over {len(rows)} rounds of the ratio within each round:")
row("bare hop writes / filed alone", 0, 1, 2)
row("cached write-through / filed alone", 0, 3, 4)
row("cached write-back hits / nulld", 5, 6, 7)
row("bare hop reads / filed alone", 8, 9, 10)
EOF
echo "cpu_yields reported:"
for port in 4 5 6 7 8 9; do
	printf '  port %s: ' "$port"
	"$BIN/xseg" stats --segment "$SEG" --port "$port" --json 2>/dev/null |
		python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["peer"], d.get("cpu_yields"))'
done
