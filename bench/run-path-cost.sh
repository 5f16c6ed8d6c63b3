#!/usr/bin/env bash
# What a request costs the machine beyond its work (issue 24): context
# switches and futex calls per request in every process of a path, beside
# the IOPS, for the paths the issue's table compares. Each cell: one
# bench-xseg run (4K random, TOTAL bytes) under `perf stat`, with a `perf
# stat -p` attached to every peer of the path for the same run. The aim
# the issue sets: under 0.2 context switches per request in every process
# at depth 16.
#   DEPTHS ("1 16")  TOTAL (64M)  BS (4K)
#   CELLS ("filed hop nulld cached-write cached-read writethrough")
#     filed: bench-xseg -> filed (writes); hop: -> nulld --forward -> filed;
#     nulld: -> nulld (writes); cached-write, cached-read: write-back hits
#     (after a first pass filling the cache); writethrough: cached
#     write-through in front of filed (writes)
# Needs perf with the syscalls tracepoints (root); the context switches of
# peers include their idle wake-ups during the run.
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=path-cost-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-64M} BS=${BS:-4K}
DEPTHS=${DEPTHS:-1 16}
CELLS=${CELLS:-filed hop nulld cached-write cached-read writethrough}
EVENTS=context-switches,syscalls:sys_enter_futex
pids=()
trap bench_cleanup EXIT
perf stat -e syscalls:sys_enter_futex -- true >/dev/null 2>&1 ||
	{ echo "perf cannot count futex calls here (root and tracefs needed)" >&2; exit 1; }

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --log-level error & filed=$!
"$BIN/nulld" --segment "$SEG" --port 3 --log-level error & nulld=$!
"$BIN/nulld" --segment "$SEG" --port 4 --forward 1 --log-level error & hop=$!
"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size 512M --max-objects 4096 \
	--write-policy writeback --log-level error & wb=$!
"$BIN/cached" --segment "$SEG" --port 5 --blocker-port 1 --cache-size 512M --max-objects 4096 \
	--write-policy writethrough --log-level error & wt=$!
pids=("$filed" "$nulld" "$hop" "$wb" "$wt")
for p in 1 2 3 4 5; do wait_bound $p; done

out=$(mktemp -d)
# The counts perf wrote in file $1 (-x, output): "CS FUTEX".
counts() {
	awk -F, '$3 == "context-switches" { cs = $1 } $3 ~ /futex/ { fx = $1 }
		 END { print cs + 0, fx + 0 }' "$1"
}
# cell NAME PORT OP DEPTH NAME:PID...: one measured run; prints a line.
cell() {
	local name=$1 port=$2 op=$3 depth=$4; shift 4
	local perfs=() np
	rm -f "$out"/*
	for np in "$@"; do
		perf stat -x, -e "$EVENTS" -o "$out/${np%%:*}" -p "${np#*:}" 2>/dev/null & perfs+=($!)
	done
	sleep 0.3   # perf attached
	perf stat -x, -e "$EVENTS" -o "$out/client" -- \
		"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$port" --op "$op" \
		--pattern rand --total-size "$TOTAL" --block-size "$BS" --iodepth "$depth" \
		--object-size 4M --seed 1 --json > "$out/json" 2>/dev/null
	kill -INT "${perfs[@]}" 2>/dev/null; wait "${perfs[@]}" 2>/dev/null
	local reqs iops line cs fx f
	reqs=$(tail -1 "$out/json" | sed -n 's/.*"requests": *\([0-9]*\).*/\1/p')
	iops=$(tail -1 "$out/json" | sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p')
	[ -n "$reqs" ] && [ "$reqs" -gt 0 ] || { echo "$name depth $depth: no result"; return; }
	line=$(printf "%-13s depth %-3s %9.0f IOPS " "$name" "$depth" "$iops")
	for f in client "${@%%:*}"; do
		read -r cs fx < <(counts "$out/$f")
		line+=$(awk -v f="$f" -v cs="$cs" -v fx="$fx" -v n="$reqs" \
			'BEGIN { printf " | %s %.2f cs %.2f futex", f, cs / n, fx / n }')
	done
	echo "$line"
}

echo "$BS random, $TOTAL a run; per request: context switches (cs) and futex calls, each process"
# The caches' first pass: the blocks the hit cells use are then cached.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op write --pattern rand \
	--total-size "$TOTAL" --block-size "$BS" --iodepth 16 --object-size 4M --seed 1 >/dev/null
for d in $DEPTHS; do
	for c in $CELLS; do
		case $c in
		filed) cell filed 1 write "$d" filed:$filed ;;
		hop) cell hop 4 write "$d" hop:$hop filed:$filed ;;
		nulld) cell nulld 3 write "$d" nulld:$nulld ;;
		cached-write) cell cached-write 2 write "$d" cached:$wb ;;
		cached-read) cell cached-read 2 read "$d" cached:$wb ;;
		writethrough) cell writethrough 5 write "$d" cached:$wt filed:$filed ;;
		*) echo "unknown cell '$c'" >&2; exit 2 ;;
		esac
	done
done
rm -rf "$out"
