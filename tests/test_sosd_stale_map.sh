#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# The monitor away while the OSD restarts (a host reboot takes both): sosd's
# client misses the OSD map that moves the OSD to its new address. librados's
# objecter asks for a newer map only on a connection reset or for an
# operation older than objecter_timeout (10 s): with --op-timeout 4 none
# got that old, so every operation went to the old address and failed
# ETIMEDOUT, for ever, with the cluster healthy again (a fresh client
# served at once). Under verified load through vlmcd: once the OSD is back,
# a READ through vlmcd must be served within a few --op-timeouts, and every
# acknowledged byte, from before and during the outage, reads back.
set -u
SEG_PREFIX=sosd-stale-map
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"
OP_TIMEOUT=4

bench() {   # volume op seed extra...
	local vol=$1 op=$2 seed=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port "$BPORT" --target-port 2 --volume "$vol" \
		--op "$op" --pattern rand --total-size 8M --block-size 64K --iodepth 8 --seed "$seed" \
		--verify full --timeout 30 --json "$@"
}
mon_pid() { cat "$CEPH_DIR/run/mon.a.pid"; }
# a stopped monitor is let go whatever happens (micro-ceph stop sends TERM)
trap 'kill -CONT "$(mon_pid)" 2>/dev/null; ceph_cleanup' EXIT

ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 128M || fail "create"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --op-timeout $OP_TIMEOUT \
	2> "$DIR/sosd.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume a:8M $(pass_volume_options b) \
	--object-size 1M 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2

echo "--- acknowledged before the outage"
BPORT=10 bench a write 1 > "$DIR/a.out" 2> "$DIR/a.err" ||
	{ head -3 "$DIR/a.err"; fail "writes before the outage"; }

echo "--- the monitor stopped while the OSD restarts, writes going on"
# a fresh volume each pass: a write acknowledged and lost is never written
# again byte for byte by a later pass
BPORT=11 passes_write b 10 &
bpid=$!
sleep 1
kill -STOP "$(mon_pid)"
"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop"
kill -CONT "$(mon_pid)"
"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start"
up=$SECONDS

echo "--- the OSD is back: a READ through vlmcd is served within a few --op-timeouts"
served=0
while [ $((SECONDS - up)) -lt $((3 * OP_TIMEOUT)) ]; do
	out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --target a --op read \
		--size 4096 --timeout 20 2>&1) && { served=1; break; }
	sleep 0.5
done
took=$((SECONDS - up))
if [ $served = 0 ]; then
	fresh=$(timeout 10 rados --conf "$CONF" -p xseg stat a_0000000000000000 2>&1 | tail -1)
	fail "no READ served ${took} s after the OSD came back (last: $out); a fresh client: $fresh"
fi
echo "served again $took s after the OSD came back"

wait $bpid   # its runtime ends about when the OSD is back
echo "--- every acknowledged byte reads back"
BPORT=10 bench a read 1 > "$DIR/ra.out" 2> "$DIR/ra.err" ||
	{ head -3 "$DIR/ra.err"; fail "the writes acknowledged before the outage"; }
BPORT=10 passes_read_back b
echo "sosd stale map: all checks passed"
