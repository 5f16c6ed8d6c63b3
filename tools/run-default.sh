#!/usr/bin/env bash
# `make run`: the main job on the embedded default, from segment creation to
# teardown, also when interrupted. The path is a file (in a temporary run
# directory, with the peers' pidfiles and logs) that `xseg up` starts and
# `xseg down` stops:
#
#   bench-xseg -> vlmcd -> cached (write-back, --persist beside the data
#   directory) -> filed (files under a directory it prints)
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
case $BACKEND in
file|rados) ;;
*) echo "make run: BACKEND: '$BACKEND' is not file or rados" >&2; exit 2 ;;
esac
# A path file's values are single words.
for v in "$SEG" "$VOLUME" "$VOLSIZE" "$CACHE" "${DATA:-}"; do
	case $v in *[[:space:]#]*) echo "make run: '$v' has a blank or '#'" >&2; exit 2 ;; esac
done
case $BACKEND in
file) BLOCKER=filed; DATA=${DATA:-$(mktemp -d /tmp/xseg-run-data.XXXXXX)} ;;
rados) BLOCKER=sosd; CEPH_DIR=$(mktemp -d /tmp/xseg-run-ceph.XXXXXX) ;;
esac
RUN=$(mktemp -d /tmp/xseg-run.XXXXXX)   # the path file, pidfiles, peers' logs
# cached's persist file (issue 22): its dirty data outlives a crash of
# cached; beside filed's directory, which stays, or in the run directory
PERSIST=${DATA:+$DATA.cached.pf}
PERSIST=${PERSIST:-$RUN/cached.pf}
PATHFILE=$RUN/path
ok=0

cleanup() {
	trap '' INT TERM HUP PIPE   # a second Ctrl-C does not cut the teardown short
	# xseg down: last started first, the cache writes back to the blocker
	# before the blocker stops; then the segment goes (not while a peer
	# still runs: then it says so, and the run directory stays)
	[ -f "$PATHFILE" ] && { "$BIN/xseg" down "$PATHFILE" --run-dir "$RUN" || ok=0; }
	if [ "$BACKEND" = rados ]; then
		tools/micro-ceph stop "$CEPH_DIR" && rm -rf "$CEPH_DIR"
	fi
	if [ $ok = 1 ]; then
		rm -rf "$RUN"
	else
		echo "make run: the path file and the peers' logs stay in $RUN" >&2
	fi
}
trap cleanup EXIT
trap 'echo; echo "interrupted: stopping every peer"; exit 130' INT TERM HUP
trap 'exit 141' PIPE   # make run | head: still down at the end

step() { echo; echo "== $*"; }
die() { echo "make run: $*" >&2; exit 1; }
# die_logs WHY: die, with the end of every peer's log
die_logs() {
	for log in "$RUN"/*.log; do
		[ -s "$log" ] && { echo "== $log" >&2; tail -20 "$log" >&2; }
	done
	die "$@"
}

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port $CLIENT --target-port $VLMCD \
		--volume "$VOLUME" --total-size "$TOTAL" --block-size "$BS" --iodepth 16 \
		--verify full --seed 7 "$@" || die_logs "bench-xseg $* failed"
}

# A path file's values are single words.
for v in "$SEG" "$VOLUME" "$VOLSIZE" "$CACHE" "${DATA:-}"; do
	case $v in *[[:space:]#]*) echo "make run: '$v' has a blank or '#'" >&2; exit 2 ;; esac
done

if [ "$BACKEND" = rados ]; then
	step "a single-node Ceph in $CEPH_DIR"
	CONF=$(WATCH_PID=$$ tools/micro-ceph start "$CEPH_DIR" | tail -1)
	[ -f "$CONF" ] || die "micro-ceph did not start (tools/install-deps --ceph?)"
	blocker="peer sosd   port=$FILED pool=xseg conf=$CONF"
else
	blocker="peer filed  port=$FILED dir=$DATA threads=2"
fi
cat > "$PATHFILE" <<EOT
# make run: bench-xseg -> vlmcd -> cached (write-back) -> $BLOCKER
segment $SEG ports=16 requests=2048 heap=256M
$blocker
peer vlmcd  port=$VLMCD blocker-port=$FILED volume=$VOLUME:$VOLSIZE object-size=4M
peer cached port=$CACHED blocker-port=$FILED cache-size=$CACHE write-policy=writeback threads=2 persist=$PERSIST plug=$FILED
EOT
step "xseg up $PATHFILE:"
sed 's/^/    /' "$PATHFILE"
"$BIN/xseg" up "$PATHFILE" --run-dir "$RUN" || die "xseg up failed"
"$BIN/xseg" status "$PATHFILE" --run-dir "$RUN" || die_logs "xseg status: not all serve"

step "write $TOTAL of verifiable data"
bench --op write --pattern rand
step "read it back through the cache, checking every byte"
bench --op read --pattern rand

step "cache statistics"
"$BIN/xseg" stats --segment "$SEG" --port $CACHED

step "unplug cached: every dirty byte goes to $BLOCKER first"
"$BIN/xseg" unplug --segment "$SEG" --via $CACHED || die_logs "unplug failed"
step "read the volume straight from $BLOCKER"
bench --op read --pattern seq

step "segment after the run"
"$BIN/xseg" info --segment "$SEG"
echo
ok=1
if [ "$BACKEND" = rados ]; then
	echo "make run: all data verified; xseg down stops the peers, then the Ceph cluster stops"
else
	echo "make run: all data verified; xseg down stops the peers now (data stays in $DATA)"
fi
