#!/usr/bin/env bash
# cached --persist (issue 22): what durability costs, beside
# bench/run-cached-vs-null.sh's CACHED_PERSIST=DIR (write-back hits with
# the file on tmpfs):
#   1. FLUSH every 256 writes (4K random, depth 16) with --persist-sync
#      flush and the file on DISK_DIR, against filed alone on the same
#      disk; CYCLES rounds each, filed and cached alternated twice.
#   2. Recovery of a full 1G file (on tmpfs): 1G written back-cached with
#      --dirty-high 100 and verified, cached SIGKILLed, restarted; the time
#      from the restart to the first answered PING, then every byte read
#      back verified.
#   DISK_DIR=/tmp (a directory on the machine's disk) CYCLES=20
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=cached-persist-$$
DATA=$(mktemp -d "${DISK_DIR:-/tmp}/cached-persist-XXXXXX")
SHM=$(mktemp -d /dev/shm/cached-persist-XXXXXX)
CYCLES=${CYCLES:-20}
pids=()
trap 'bench_cleanup; rm -rf "$SHM"' EXIT

json() { tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(d[k]) for k in sys.argv[1:]))" "$@"; }
stats() { "$BIN/xseg" stats --segment "$SEG" --port "$1" --json | json "${@:2}"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/filed" --threads 2 --log-level error & pids+=($!)
"$BIN/cached" --segment "$SEG" --port 2 --blocker-port 1 --cache-size 256M --max-objects 4096 \
	--persist "$DATA/cache.pf" --persist-sync flush --log-level error & pids+=($!)
wait_bound 1; wait_bound 2

cycle() {   # port seed: 256 random 4K writes at depth 16, then a FLUSH
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op write --pattern rand \
		--total-size 1M --block-size 4K --iodepth 16 --object-size 1M --seed "$2" \
		> "$DATA/cycle.out" 2>&1 || { cat "$DATA/cycle.out"; exit 1; }
	"$BIN/xreq" --segment "$SEG" --port 11 --target-port "$1" --op flush > /dev/null ||
		{ echo "FLUSH to port $1 failed"; exit 1; }
}
echo "FLUSH every 256 writes (4K random, depth 16), file on $(df --output=source "$DATA" | tail -1)"
for port in 1 2 1 2; do
	t0=$(date +%s%N)
	for i in $(seq "$CYCLES"); do cycle "$port" "$i"; done
	echo "  $([ "$port" = 1 ] && echo "filed alone          " || echo "cached --persist flush"):" \
		"$CYCLES x (256 writes + FLUSH) in $(ms_since "$t0") ms"
done
echo "  cached: $(stats 2 persist_syncs persist_sync_avg_us) (fdatasyncs, mean us)"

echo "recovery of a full 1G file on tmpfs"
start3() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 1G --max-objects 4096 \
		--dirty-high 100 --persist "$SHM/cache.pf" "$@" 2>> "$DATA/cached3.log" & c=$!
	pids+=($c)
}
big() {   # op: 1G sequential at 256K, verified
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op "$1" --pattern seq \
		--total-size 1G --block-size 256K --iodepth 16 --object-size 4M --seed 9 --verify full --json
}
start3 --persist-discard
wait_bound 3
echo "  written: $(big write | json failed) failed; dirty $(stats 3 dirty_bytes) bytes" \
	"(the rest was written back for room)"
kill -KILL "$c"; wait "$c" 2>/dev/null
t0=$(date +%s%N)
start3
until "$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op ping --timeout 30 >/dev/null 2>&1; do
	sleep 0.01
done
echo "  restart to the first PING answered: $(ms_since "$t0") ms"
grep "persist:" "$DATA/cached3.log" | tail -1 | sed 's/^/  /'
echo "  read back: $(big read | json failed corrupted) (failed, corrupted)"
