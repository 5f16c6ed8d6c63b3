#!/usr/bin/env bash
# sosd on a throw-away single-node Ceph (tools/micro-ceph, memstore: the
# cluster's software path, not a disk), issue 6's benchmark:
#   1. the cluster's own baseline: `rados bench` and fio's rados engine
#   2. sosd alone, then cached (write-back, cache larger than the workload)
#      in front of it: 4K and 64K random writes and reads at iodepth 16
#   3. the sustained run: cache = 1/2 of the workload, write-back, a fresh
#      cache per block size; then its reads once more from sosd alone, on the
#      same objects, as the read pass's closest baseline
# One line per run. Environment: TOTAL (workload, default 64M), SECONDS_RB
# (rados bench seconds per run, 5), DEPTH (16), SIZES ("4K 64K"),
# SOSD_THREADS (1).
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=sosd-bench-$$
CEPH_DIR=$(mktemp -d /tmp/sosd-bench-ceph.XXXXXX)
TOTAL=${TOTAL:-64M}
SECONDS_RB=${SECONDS_RB:-5}
DEPTH=${DEPTH:-16}
SIZES=${SIZES:-"4K 64K"}
pids=()
cleanup() {
	stop_peers
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	tools/micro-ceph stop "$CEPH_DIR" 2>/dev/null
	rm -rf "$CEPH_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "run-sosd-bench: $*" >&2; exit 1; }


bytes() { numfmt --from=iec "$1"; }

CONF=$(WATCH_PID=$$ tools/micro-ceph start "$CEPH_DIR" | tail -1)
[ -f "$CONF" ] || die "micro-ceph did not start (tools/install-deps --ceph)"
echo "cluster: $CONF (memstore), pool xseg, depth $DEPTH, workload $TOTAL in 4M objects"

echo "== 1. the cluster's baseline"
for bs in $SIZES; do
	timeout 120 rados --conf "$CONF" -p xseg bench "$SECONDS_RB" write -b "$(bytes "$bs")" \
		-t "$DEPTH" --no-cleanup > "$CEPH_DIR/rb.out" 2>&1 || die "rados bench write"
	printf 'rados bench  write bs=%4s depth=%2s  %9.0f IOPS  avg lat %7.1f us\n' "$bs" "$DEPTH" \
		"$(awk '/^Average IOPS/ {print $3}' "$CEPH_DIR/rb.out")" \
		"$(awk '/^Average Latency/ {print $3 * 1e6}' "$CEPH_DIR/rb.out")"
	timeout 120 rados --conf "$CONF" -p xseg bench "$SECONDS_RB" rand -t "$DEPTH" \
		> "$CEPH_DIR/rb.out" 2>&1 || die "rados bench rand"
	printf 'rados bench  read  bs=%4s depth=%2s  %9.0f IOPS  avg lat %7.1f us\n' "$bs" "$DEPTH" \
		"$(awk '/^Average IOPS/ {print $3}' "$CEPH_DIR/rb.out")" \
		"$(awk '/^Average Latency/ {print $3 * 1e6}' "$CEPH_DIR/rb.out")"
	timeout 120 rados --conf "$CONF" -p xseg cleanup > /dev/null 2>&1
done
if fio --enghelp 2>/dev/null | grep -qw rados; then
	for bs in $SIZES; do for rw in randwrite randread; do
		timeout 300 fio --name=sosd-baseline --ioengine=rados --clientname=admin --pool=xseg \
			--conf="$CONF" --rw=$rw --bs="$bs" --iodepth="$DEPTH" --size="$TOTAL" \
			--nrfiles=$(( $(bytes "$TOTAL") / 4194304 )) --output-format=json \
			> "$CEPH_DIR/fio.json" 2> "$CEPH_DIR/fio.err" || die "fio $rw $bs: $(tail -1 "$CEPH_DIR/fio.err")"
		python3 - "$CEPH_DIR/fio.json" "$rw" "$bs" "$DEPTH" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["read" if sys.argv[2] == "randread" else "write"]
pct = side["clat_ns"].get("percentile", {})
op = "read " if sys.argv[2] == "randread" else "write"
print(f"fio rados    {op} bs={sys.argv[3]:>4} depth={sys.argv[4]:>2}  {side['iops']:>9.0f} IOPS "
      f"{side['bw'] / 1024:>8.1f} MiB/s  p50 {pct.get('50.000000', 0) / 1000:>7.1f} us  "
      f"p99 {pct.get('99.000000', 0) / 1000:>8.1f} us")
PY
	done; done
else
	echo "fio has no rados engine here: baseline from rados bench only"
fi

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" \
	--threads "${SOSD_THREADS:-1}" & pids+=($!)
wait_bound 1

seed=200
run() {   # label op bs [total]
	local label=$1 op=$2 bs=$3 total=${4:-$TOTAL}
	[ "$op" = write ] && seed=$((seed + 1))   # a read reads what the write before wrote
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" \
		--pattern rand --total-size "$total" --block-size "$bs" --iodepth "$DEPTH" \
		--object-size 4M --seed "$seed" --timeout 120 --json | tail -1 |
	python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"$label {d['op']:5} bs={d['block_size']//1024:>3}K depth={d['iodepth']:>2}  {d['iops']:>9.0f} IOPS {d['mib_per_s']:>8.1f} MiB/s  p50 {d['lat_us_p50']:>7.1f} us  p99 {d['lat_us_p99']:>8.1f} us  failed {d['failed']}\")"
}

cached() {   # cache-size: plugged in front of sosd
	"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size "$1" \
		--max-objects 4096 --write-policy writeback --threads 2 & pids+=($!)
	wait_bound 2
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 >/dev/null || die "plug"
}
uncache() {   # unplug (writes every dirty byte back) and stop the cache
	"$BIN/xseg" unplug --segment "$SEG" --via 2 >/dev/null || die "unplug"
	kill -TERM "${pids[-1]}"; wait "${pids[-1]}"; unset 'pids[-1]'
}

echo "== 2. sosd alone, then cached (write-back, 1G) -> sosd"
for bs in $SIZES; do run "sosd alone       " write "$bs"; run "sosd alone       " read "$bs"; done
cached 1G
for bs in $SIZES; do run "cached WB -> sosd" write "$bs"; run "cached WB -> sosd" read "$bs"; done
uncache

half=$(( $(bytes "$TOTAL") / 2 ))
echo "== 3. sustained: cache $((half >> 20))M = 1/2 of the $TOTAL workload"
for bs in $SIZES; do
	cached "$half"   # a fresh cache for each size
	run "cached WB 1/2    " write "$bs"
	run "cached WB 1/2    " read "$bs"
	"$BIN/xseg" stats --segment "$SEG" --port 2 | grep -E "hits|misses|evictions|flushes|waits"
	uncache
	# The read pass again without the cache, on the same objects and the
	# cluster as it is now (it slows down as memstore fills): the baseline
	# closest to the cached read pass.
	run "sosd alone again " read "$bs"
done
