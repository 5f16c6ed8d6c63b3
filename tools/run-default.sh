#!/usr/bin/env bash
# `make run`: the main job on the embedded default, from segment creation to
# teardown, also when interrupted:
#
#   bench-xseg -> vlmcd -> cached (write-back) -> filed (files under a
#   directory it prints)
#
# bench-xseg writes a volume with verifiable data, reads it back verifying
# every byte, then cached is unplugged (every dirty byte written back to
# filed) and the volume is read again straight from filed.
#
# BACKEND=rados (`make run BACKEND=rados`): sosd instead of filed, on a
# throw-away single-node Ceph (tools/micro-ceph) started first and stopped
# at the end.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=${SEGMENT:-xseg-run-$$}
VOLUME=${VOLUME:-vol1}
VOLSIZE=${VOLSIZE:-256M}
TOTAL=${TOTAL:-128M}
BS=${BS:-64K}
CACHE=${CACHE:-64M}
BACKEND=${BACKEND:-file}
FILED=1 CACHED=2 VLMCD=3 CLIENT=10
pids=()
case $BACKEND in
file) BLOCKER=filed; DATA=${DATA:-$(mktemp -d /tmp/xseg-run-data.XXXXXX)} ;;
rados) BLOCKER=sosd; CEPH_DIR=$(mktemp -d /tmp/xseg-run-ceph.XXXXXX) ;;
*) echo "make run: BACKEND: '$BACKEND' is not file or rados" >&2; exit 2 ;;
esac

cleanup() {
	# last started first: the cache writes back to filed before filed stops
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null; wait "${pids[i]}" 2>/dev/null
	done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	if [ "$BACKEND" = rados ]; then
		tools/micro-ceph stop "$CEPH_DIR" && rm -rf "$CEPH_DIR"
	fi
}
trap cleanup EXIT
trap 'echo; echo "interrupted: stopping every peer"; exit 130' INT TERM

step() { echo; echo "== $*"; }
die() { echo "make run: $*" >&2; exit 1; }

wait_bound() {
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\": *$1,[^}]*\"owner\": *[1-9]" && return 0
		sleep 0.05
	done
	die "port $1 was never bound (see the peer's messages above)"
}

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port $CLIENT --target-port $VLMCD \
		--volume "$VOLUME" --total-size "$TOTAL" --block-size "$BS" --iodepth 16 \
		--verify full --seed 7 "$@" || die "bench-xseg $* failed"
}

step "segment $SEG"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 256M || exit 1

if [ "$BACKEND" = rados ]; then
	step "a single-node Ceph in $CEPH_DIR"
	CONF=$(WATCH_PID=$$ tools/micro-ceph start "$CEPH_DIR" | tail -1)
	[ -f "$CONF" ] || die "micro-ceph did not start (tools/install-deps --ceph?)"
	step "sosd on port $FILED, pool xseg of $CONF"
	"$BIN/sosd" --segment "$SEG" --port $FILED --pool xseg --conf "$CONF" & pids+=($!)
else
	step "filed on port $FILED, data in $DATA"
	"$BIN/filed" --segment "$SEG" --port $FILED --dir "$DATA" --threads 2 & pids+=($!)
fi
wait_bound $FILED

step "vlmcd on port $VLMCD: volume $VOLUME of $VOLSIZE in 4M objects"
"$BIN/vlmcd" --segment "$SEG" --port $VLMCD --blocker-port $FILED \
	--volume "$VOLUME:$VOLSIZE" --object-size 4M & pids+=($!)
wait_bound $VLMCD

step "cached on port $CACHED ($CACHE, write-back), plugged in front of $BLOCKER"
"$BIN/cached" --segment "$SEG" --port $CACHED --blocker-port $FILED \
	--cache-size "$CACHE" --write-policy writeback --threads 2 & pids+=($!)
wait_bound $CACHED
"$BIN/xseg" plug --segment "$SEG" --port $FILED --via $CACHED || die "plug failed"

step "write $TOTAL of verifiable data"
bench --op write --pattern rand
step "read it back through the cache, checking every byte"
bench --op read --pattern rand

step "cache statistics"
"$BIN/xseg" stats --segment "$SEG" --port $CACHED

step "unplug cached: every dirty byte goes to $BLOCKER first"
"$BIN/xseg" unplug --segment "$SEG" --via $CACHED || die "unplug failed"
step "read the volume straight from $BLOCKER"
bench --op read --pattern seq

step "segment after the run"
"$BIN/xseg" info --segment "$SEG"
echo
if [ "$BACKEND" = rados ]; then
	echo "make run: all data verified; peers and the Ceph cluster stop now"
else
	echo "make run: all data verified; peers stop now (data stays in $DATA)"
fi
