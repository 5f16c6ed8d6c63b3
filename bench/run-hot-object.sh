#!/usr/bin/env bash
# A hot object read in parallel (issue 24's aim: 16 readers of one 4M
# object at depth 16 reach >= 0.8x of the same reads spread over 16
# objects). cached write-back holds 16 objects (a first pass of writes);
# then, in rounds, BS random reads at DEPTH for RUNTIME seconds over one
# object (--total-size 4M) and over all 16 (64M), each a run of its own.
# Every read is a hit; the ratio one/spread is printed per round and the
# median at the end, with cached's parallel_hits (hits served beside the
# object's queue).
#   ROUNDS=5 RUNTIME=3 BS=4K DEPTH=16 CACHED_THREADS=(cached's default)
#   CACHED_BASELINE=PATH  an older cached beside the new one (its own
#                         port, same segment), measured in each round too
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=hot-object-$$
DATA=$(mktemp -d)
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-3} BS=${BS:-4K} DEPTH=${DEPTH:-16}
pids=()
trap bench_cleanup EXIT

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --log-level error & pids+=($!)
start_cached() {   # binary port
	"$1" --segment "$SEG" --port "$2" --blocker-port 1 --cache-size 256M --max-objects 1024 \
		--write-policy writeback ${CACHED_THREADS:+--threads "$CACHED_THREADS"} \
		--log-level error & pids+=($!)
}
start_cached "$BIN/cached" 2
[ -n "${CACHED_BASELINE:-}" ] && start_cached "$CACHED_BASELINE" 4
wait_bound 1; wait_bound 2
[ -n "${CACHED_BASELINE:-}" ] && wait_bound 4

bench() {   # port op size [--runtime S]
	local port=$1 op=$2 size=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$port" --op "$op" \
		--pattern rand --total-size "$size" --block-size "$BS" --iodepth "$DEPTH" \
		--object-size 4M --seed 1 --json "$@" | tail -1 |
		python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["iops"])'
}
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
parallel_hits() {
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json 2>/dev/null |
		sed -n 's/.*"parallel_hits": *\([0-9]*\).*/\1/p'
}

bench 2 write 64M >/dev/null   # 16 objects, every later read a hit
[ -n "${CACHED_BASELINE:-}" ] && bench 4 write 64M >/dev/null
echo "$BS random reads (hits), depth $DEPTH, $RUNTIME s a run: one 4M object vs 16 objects"
new=() old=()
for i in $(seq "$ROUNDS"); do
	one=$(bench 2 read 4M --runtime "$RUNTIME"); spread=$(bench 2 read 64M --runtime "$RUNTIME")
	r=$(ratio "$one" "$spread"); new+=("$r")
	line="round $i: cached one $one  spread $spread  (${r}x)"
	if [ -n "${CACHED_BASELINE:-}" ]; then
		one=$(bench 4 read 4M --runtime "$RUNTIME"); spread=$(bench 4 read 64M --runtime "$RUNTIME")
		r=$(ratio "$one" "$spread"); old+=("$r")
		line+="   baseline one $one  spread $spread  (${r}x)"
	fi
	echo "$line"
done
line="median one/spread: cached $(median "${new[@]}")x (aim >= 0.8)"
[ -n "${CACHED_BASELINE:-}" ] && line+="  baseline $(median "${old[@]}")x"
echo "$line; cached parallel_hits $(parallel_hits 2)"
