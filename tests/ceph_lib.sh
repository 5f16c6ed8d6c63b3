# Sourced after lib.sh by the tests that need a real Ceph (test_sosd*.sh):
# a throw-away single-node cluster under $DIR/ceph, stopped on exit, also
# when the test is killed (micro-ceph's watchdog follows this shell's pid).
# Sets CONF. Without the Ceph packages the test is skipped (exit 0) with the
# command that installs them.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICRO_CEPH=$ROOT/tools/micro-ceph
CEPH_DIR=$DIR/ceph

for tool in ceph-mon ceph-osd ceph rados; do
	command -v $tool >/dev/null || {
		echo "SKIP: $tool not installed (tools/install-deps --ceph)"; exit 0; }
done

# librados is not instrumented: see tsan-rados.supp.
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$ROOT/tests/tsan-rados.supp"

ceph_cleanup() {
	"$MICRO_CEPH" stop "$CEPH_DIR" >/dev/null 2>&1
	cleanup
}
trap ceph_cleanup EXIT
trap 'exit 1' INT TERM

# Another cluster may take the free monitor port micro-ceph picked: retry.
ceph_start() {
	local try
	for try in 1 2 3; do
		CONF=$(WATCH_PID=$$ "$MICRO_CEPH" start "$CEPH_DIR" 2> "$DIR/micro-ceph.log" | tail -1)
		[ -f "$CONF" ] && return 0
		echo "micro-ceph start failed (try $try):"; tail -5 "$DIR/micro-ceph.log"
	done
	fail "no Ceph cluster"
}

# Every daemon started under $CEPH_DIR has ended.
ceph_gone() {
	! pgrep -f -- "--conf $CEPH_DIR/ceph.conf" >/dev/null
}

# A verified writer through a fault that cannot hide a lost write: one
# fresh volume per pass (PREFIX1, PREFIX2, ... up to PASS_VOLUMES, seed
# = the pass), never a rewrite of data a later pass could write again
# byte for byte (a --runtime writer of one seed would). Needs the test's
# `bench VOLUME OP SEED extra...` and vlmcd started with
# $(pass_volume_options PREFIX). Each pass writes PASS_SIZE (the last
# --total-size given to bench-xseg wins).
PASS_VOLUMES=60 PASS_SIZE=2M
pass_volume_options() {   # PREFIX: vlmcd's --volume options
	local k
	for k in $(seq $PASS_VOLUMES); do printf -- '--volume %s%d:%s ' "$1" "$k" $PASS_SIZE; done
}
passes_write() {   # PREFIX SECONDS: a pass every 0.5 s; the count in $DIR/PREFIX.passes
	local end=$((SECONDS + $2)) k=0
	while [ $SECONDS -lt $end ] && [ $k -lt $PASS_VOLUMES ]; do
		k=$((k + 1))
		bench "$1$k" write "$k" --total-size $PASS_SIZE --unacked "$DIR/$1$k.unacked" > "$DIR/$1$k.out" 2> "$DIR/$1$k.err"
		echo $k > "$DIR/$1.passes"   # the passes ended so far
		sleep 0.5
	done
}
passes_failed() {   # PREFIX: the writes no pass (ended so far) acknowledged
	local k n=0
	[ -f "$DIR/$1.passes" ] || { echo 0; return; }
	for k in $(seq "$(cat "$DIR/$1.passes")"); do n=$((n + $(json "$DIR/$1$k.out" failed))); done
	echo $n
}
passes_read_back() {   # PREFIX: every pass's acknowledged bytes, or fail
	local k
	for k in $(seq "$(cat "$DIR/$1.passes")"); do
		[ "$(json "$DIR/$1$k.out" corrupted)" = 0 ] || fail "pass $k ($1$k): corrupted"
		bench "$1$k" read "$k" --total-size $PASS_SIZE --may-differ "$DIR/$1$k.unacked" > "$DIR/r$1$k.out" \
			2> "$DIR/r$1$k.err" ||
			{ head -3 "$DIR/r$1$k.err"; tail -1 "$DIR/r$1$k.out"; fail "pass $k ($1$k) read back"; }
	done
	echo "$(cat "$DIR/$1.passes") passes ($1*) read back, $(passes_failed "$1") writes unacknowledged"
}
