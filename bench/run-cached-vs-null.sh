#!/usr/bin/env bash
# cached's write-back hits against the null peer (issue 5's aim: at 4K
# depth 16, at least 70 % of nulld's rate). The same client writes the same
# blocks through cached (a first pass of writes fills the cache, the next
# ones hit) and to nulld, interleaved in pairs; the ratio of each pair is
# printed. OP=read measures read hits instead (after the same first pass).
#   CACHED_BASELINE=PATH  a second cached binary, run beside the new one
#                         in each pair (its own port, same segment)
#   CACHED_PERSIST=DIR    a cached with --persist DIR/cached-bench.pf
#                         (--persist-sync $PERSIST_SYNC, default flush)
#                         beside the plain one in each pair (issue 22's
#                         aim: >= 0.8x of it with DIR on tmpfs)
#   PAIRS=5 TOTAL=256M BS=4K DEPTH=16 OP=write CACHED_THREADS=(cached's default)
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-null-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-256M} BS=${BS:-4K} DEPTH=${DEPTH:-16} PAIRS=${PAIRS:-5} OP=${OP:-write}
pids=()
trap bench_cleanup EXIT

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 --log-level error & pids+=($!)
"$BIN/nulld" --segment "$SEG" --port 3 --threads 2 > /dev/null & pids+=($!)
start_cached() {   # binary port [options...]
	local bin=$1 port=$2; shift 2
	"$bin" --segment "$SEG" --port "$port" --blocker-port 1 --cache-size 1G --max-objects 4096 \
		--write-policy writeback ${CACHED_THREADS:+--threads "$CACHED_THREADS"} --log-level error \
		"$@" & pids+=($!)
}
start_cached "$BIN/cached" 2
[ -n "${CACHED_BASELINE:-}" ] && start_cached "$CACHED_BASELINE" 4
[ -n "${CACHED_PERSIST:-}" ] && start_cached "$BIN/cached" 5 --persist "$CACHED_PERSIST/cached-bench.pf" \
	--persist-sync "${PERSIST_SYNC:-flush}" --persist-discard
wait_bound 1; wait_bound 2; wait_bound 3
[ -n "${CACHED_BASELINE:-}" ] && wait_bound 4
[ -n "${CACHED_PERSIST:-}" ] && wait_bound 5

iops() {   # port seed [op]
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op "${3:-$OP}" \
		--pattern rand --total-size "$TOTAL" --block-size "$BS" --iodepth "$DEPTH" \
		--object-size 4M --seed "$2" --json | tail -1 |
		python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["iops"])'
}
echo "$BS random ${OP}s, depth $DEPTH, $TOTAL per run; IOPS"
line="first pass of writes (cache filling): cached $(iops 2 1 write)"
[ -n "${CACHED_BASELINE:-}" ] && line+="  baseline $(iops 4 2 write)"
[ -n "${CACHED_PERSIST:-}" ] && line+="  persist $(iops 5 3 write)"
echo "$line"
for i in $(seq "$PAIRS"); do
	n=$(iops 3 7); c=$(iops 2 1)
	line="pair $i: nulld $n  cached $c ($(python3 -c "print('%.2f' % ($c / $n))")x)"
	if [ -n "${CACHED_BASELINE:-}" ]; then
		b=$(iops 4 2)
		line+="  baseline $b ($(python3 -c "print('%.2f' % ($b / $n))")x)"
	fi
	if [ -n "${CACHED_PERSIST:-}" ]; then
		p=$(iops 5 3)
		line+="  persist $p ($(python3 -c "print('%.2f' % ($p / $c))")x of cached)"
	fi
	echo "$line"
done
