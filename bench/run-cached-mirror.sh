#!/usr/bin/env bash
# Replicated write-back (issue 23): 4K random writes at depth 16 into
#   write-back   cached write-back, no mirror (port 2 of segment A)
#   mirrored     cached write-back with --mirror-port 5: every write also
#                through synapsed over loopback TCP to a replica cached on
#                segment B (port 3 of A)
#   write-through  cached write-through to filed (port 4 of A)
# all three in front of one filed (segment A, port 1; the replica's filed
# on B shares its directory), the same client, the runs of a round one
# after the other; the median IOPS of ROUNDS rounds of each, and the
# ratios mirrored/write-through (issue 23's aim: >= 2) and
# mirrored/write-back (aim: >= 0.5). Every cache is large enough for the
# run (nothing written back during it; later rounds overwrite dirty data).
#   ROUNDS=3 TOTAL=64M BS=4K DEPTH=16 CACHED_THREADS=(cached's default)
#   CACHED_OPTS: more options for every cached (e.g. --spin-us 300)
#   DATA_DIR: where filed keeps the objects (default: mktemp -d, $TMPDIR or /tmp)
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-mirror-a-$$ SEGB=cached-mirror-b-$$
DATA=$(mktemp -d ${DATA_DIR:+"$DATA_DIR/cached-mirror-XXXXXX"})
ROUNDS=${ROUNDS:-3} TOTAL=${TOTAL:-64M} BS=${BS:-4K} DEPTH=${DEPTH:-16}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
trap 'bench_cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT

for s in "$SEG" "$SEGB"; do
	"$BIN/xseg" create --segment "$s" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
done
wait_bound_b() { SEG=$SEGB wait_bound "$1"; }
cached() {   # segment port [options...]
	local seg=$1 port=$2; shift 2
	"$BIN/cached" --segment "$seg" --port "$port" --blocker-port 1 --cache-size 512M \
		--max-objects 4096 ${CACHED_THREADS:+--threads "$CACHED_THREADS"} --log-level error \
		${CACHED_OPTS:-} "$@" & pids+=($!)
}
# B: the replica's side, started first (a cache after its blocker)
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DATA" --threads 2 --log-level error & pids+=($!)
wait_bound_b 1
cached "$SEGB" 3 --replica
wait_bound_b 3
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 3 \
	--log-level error & pids+=($!)
wait_bound_b 2
# A
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA" --threads 2 --log-level error & pids+=($!)
wait_bound 1
"$BIN/synapsed" --segment "$SEG" --port 5 --remote "127.0.0.1:$PORT" --log-level error & pids+=($!)
wait_bound 5
cached "$SEG" 2 --write-policy writeback
cached "$SEG" 3 --write-policy writeback --mirror-port 5
cached "$SEG" 4 --write-policy writethrough
wait_bound 2; wait_bound 3; wait_bound 4
cstat() {   # port field
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json |
		python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"
}
for _ in $(seq 100); do [ "$(cstat 3 mirror_state)" = mirrored ] && break; sleep 0.1; done
[ "$(cstat 3 mirror_state)" = mirrored ] || { echo "the primary never became mirrored" >&2; exit 1; }

iops() {   # port seed
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op write \
		--pattern rand --total-size "$TOTAL" --block-size "$BS" --iodepth "$DEPTH" \
		--object-size 4M --seed "$2" --json | tail -1 |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f" % d["iops"] if d["failed"] == 0 else "failed")'
}
echo "$BS random writes, depth $DEPTH, $TOTAL per run, filed on $(df --output=source "$DATA" | tail -1); IOPS"
wb=() mi=() wt=()
for r in $(seq "$ROUNDS"); do
	wb+=("$(iops 2 1)") mi+=("$(iops 3 2)") wt+=("$(iops 4 3)")
	echo "round $r: write-back ${wb[-1]}  mirrored ${mi[-1]}  write-through ${wt[-1]}"
done
python3 - "${wb[*]}" "${mi[*]}" "${wt[*]}" <<'PY'
import statistics, sys
wb, mi, wt = ([float(x) for x in a.split()] for a in sys.argv[1:])
m = {k: statistics.median(v) for k, v in (("write-back", wb), ("mirrored", mi), ("write-through", wt))}
print("medians: " + "  ".join("%s %.0f" % kv for kv in m.items()))
print("mirrored/write-through %.2fx (aim >= 2)  mirrored/write-back %.2fx (aim >= 0.5)" %
      (m["mirrored"] / m["write-through"], m["mirrored"] / m["write-back"]))
PY
echo "mirror: $(cstat 3 mirror_writes) writes, rtt avg $(cstat 3 mirror_rtt_avg_us) us (as the primary sees it)," \
	"$(cstat 3 mirror_failures) failures, state $(cstat 3 mirror_state)"
echo "synapsed A (port 5), from taking a request to its answer: avg $(cstat 5 lat_us_avg) us," \
	"p50 $(cstat 5 lat_us_p50) us, p99 $(cstat 5 lat_us_p99) us over $(cstat 5 requests) requests"
