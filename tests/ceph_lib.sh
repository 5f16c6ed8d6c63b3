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
