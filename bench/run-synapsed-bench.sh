#!/usr/bin/env bash
# synapsed over loopback (issue 7): bench-xseg on segment A -> synapsed A
# ==TCP==> synapsed B -> TARGET on segment B, against bench-xseg straight to
# TARGET on segment B (the same path without synapsed). 4K and 64K random
# reads and writes at iodepth 1 and 16.
#   TARGET=filed (default; data under $TMPDIR, tmpfs by default) or nulld
#   TOTAL per run (default 64M at 4K, 1G at 64K: a 64M row at 64K depth 16
#   lasts a twentieth of a second, too short to measure a rate), THREADS
#   (synapsed workers, default 2)
#   BENCH_OPTS: more bench-xseg options (e.g. --spin-us 300), every row
#   PIN_ENDS="A B": run synapsed A on CPU A and synapsed B on CPU B (taskset),
#   as two hosts would: on one host both ends' spinning network threads may
#   otherwise share a CPU and wait for each other's turn
#   SYNAPSED_BASELINE=PATH: another synapsed binary (an older build) as a
#   second pair on its own ports and TCP port, a "baseline" row per case
set -u
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
export TMPDIR=${TMPDIR:-/dev/shm}
SEGA=syn-bench-a-$$ SEGB=syn-bench-b-$$
DATA=$(mktemp -d)
TOTAL=${TOTAL:-} TARGET=${TARGET:-filed} THREADS=${THREADS:-2}
free_tcp_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
PORT=$(free_tcp_port)
BASELINE=${SYNAPSED_BASELINE:-}
pids=()
cleanup() {
	stop_peers
	"$BIN/xseg" destroy --segment "$SEGA" 2>/dev/null
	"$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null
	rm -rf "$DATA"
}
trap cleanup EXIT
for s in "$SEGA" "$SEGB"; do
	"$BIN/xseg" create --segment "$s" --ports 16 --requests 2048 --heap 512M >/dev/null || exit 1
done
case $TARGET in
filed) "$BIN/filed" --segment "$SEGB" --port 1 --dir "$DATA" --threads 2 & pids+=($!) ;;
nulld) "$BIN/nulld" --segment "$SEGB" --port 1 & pids+=($!) ;;
*) echo "TARGET must be filed or nulld" >&2; exit 2 ;;
esac
PIN_A= PIN_B=
if [ -n "${PIN_ENDS:-}" ]; then
	set -- $PIN_ENDS
	PIN_A="taskset -c $1" PIN_B="taskset -c $2"
fi
$PIN_B "$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 1 \
	--threads "$THREADS" ${SYNAPSED_OPTS:-} & pids+=($!)
sleep 0.3
$PIN_A "$BIN/synapsed" --segment "$SEGA" --port 2 --remote "127.0.0.1:$PORT" --threads "$THREADS" ${SYNAPSED_OPTS:-} & pids+=($!)
paths="direct synapsed"
if [ -n "$BASELINE" ]; then
	BPORT=$(free_tcp_port)
	$PIN_B "$BASELINE" --segment "$SEGB" --port 3 --listen "127.0.0.1:$BPORT" --target-port 1 \
		--threads "$THREADS" ${SYNAPSED_OPTS:-} & pids+=($!)
	sleep 0.3
	$PIN_A "$BASELINE" --segment "$SEGA" --port 3 --remote "127.0.0.1:$BPORT" --threads "$THREADS" \
		${SYNAPSED_OPTS:-} & pids+=($!)
	paths="direct synapsed baseline"
fi
sleep 0.5
seed=0
for bs in ${SIZES:-4K 64K}; do for depth in ${DEPTHS:-1 16}; do for op in ${OPS:-write read}; do
	[ $op = write ] && seed=$((seed + 1))
	total=${TOTAL:-$([ "$bs" = 4K ] && echo 64M || echo 1G)}
	for path in $paths; do
		case $path in
		direct) seg=$SEGB tport=1 ;;
		synapsed) seg=$SEGA tport=2 ;;
		baseline) seg=$SEGA tport=3 ;;
		esac
		"$BIN/bench-xseg" --segment "$seg" --port 10 --target-port $tport --object-size 4M \
			--op $op --pattern rand --total-size "$total" --block-size $bs --iodepth $depth \
			--seed $seed --json ${BENCH_OPTS:-} |
		tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"$TARGET {'$path':8} {d['op']:5} bs={d['block_size']//1024:>2}K depth={d['iodepth']:>2} {d['iops']:>9.0f} IOPS {d['mib_per_s']:>8.1f} MiB/s p50 {d['lat_us_p50']:>7.1f} us p99 {d['lat_us_p99']:>8.1f} us failed {d['failed']}\")"
	done
done; done; done
