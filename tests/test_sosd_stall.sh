#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd while the cluster is down, with more in flight than librados's
# objecter lets through at once (objecter_inflight_op_bytes, 100M by
# default): the objecter blocked sosd's worker in the submitting call until
# earlier operations were done, so sosd answered nothing meanwhile (not
# even a PING), and a request's --op-timeout only began once it got through:
# 16 READs of 16M failed after 3 x --op-timeout instead of one. Every
# request must fail within about --op-timeout, a PING must be answered at
# once, and sosd must serve again when the OSD is back. Then a client
# killed with requests in flight: sosd answers them all (nothing left in
# flight) and keeps serving.
set -u
SEG_PREFIX=sosd-stall
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"
OP_TIMEOUT=4

ceph_start
# 16 x 16M data buffers in flight, and room for more
"$BIN/xseg" create --segment "$SEG" --ports 32 --requests 512 --heap 1G || fail "xseg create"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" \
	--op-timeout $OP_TIMEOUT 2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
xreq() { "$BIN/xreq" --segment "$SEG" --port 20 --target-port 1 "$@"; }
xreq --op write --target stall-probe --data before > /dev/null || fail "write before the outage"

echo "--- OSD down, 256M of READs in flight: each fails after --op-timeout, PING answered"
"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop"
start=$SECONDS
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix "stall-$$" \
	--op read --pattern seq --block-size 16M --object-size 16M --total-size 256M \
	--iodepth 16 --verify none --timeout 60 --json > "$DIR/b.out" 2> "$DIR/b.err" & bpid=$!
sleep 1.5
kill -0 $bpid || { cat "$DIR/b.err"; fail "the reads ended before the PING"; }
xreq --op ping --timeout 2 > "$DIR/ping.out" 2>&1; ping_rc=$?
wait $bpid
took=$((SECONDS - start))
echo "PING: exit $ping_rc; the READs were answered after $took s"
tail -1 "$DIR/b.out" | grep -q '"requests":16,"failed":16' ||
	{ cat "$DIR/b.err"; tail -1 "$DIR/b.out"; fail "not every READ failed"; }
[ $ping_rc -eq 0 ] ||
	fail "no answer to a PING within 2 s while the OSD is down: a worker is blocked"
[ $took -le $((OP_TIMEOUT + 4)) ] ||
	fail "the READs were answered after $took s with --op-timeout $OP_TIMEOUT"
kill -0 $spid || fail "sosd died during the outage"
"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start"
out=$(xreq --op read --target stall-probe --size 6 --timeout 30) || fail "read after the outage: $out"
case "$out" in *"data='before'"*) ;; *) fail "read after the outage: $out" ;; esac

echo "--- a client killed with 256 requests in flight"
"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 1 --prefix "killed-$$" \
	--op write --pattern rand --block-size 64K --total-size 64M --runtime 30 --iodepth 256 \
	--verify none --timeout 60 > /dev/null 2>&1 & bpid=$!
sleep 1
kill -0 $bpid || fail "the client ended before it was killed"
kill -KILL $bpid
wait $bpid 2>/dev/null
for _ in $(seq 100); do
	[ "$(peer_stat 1 in_flight)" = 0 ] && break
	sleep 0.1
done
[ "$(peer_stat 1 in_flight)" = 0 ] || fail "requests of the killed client left in flight"
kill -0 $spid || fail "sosd died after its client was killed"
out=$(xreq --op write --target stall-probe --data after) || fail "write after the kill: $out"
out=$(xreq --op read --target stall-probe --size 5) || fail "read after the kill: $out"
case "$out" in *"data='after'"*) ;; *) fail "read after the kill: $out" ;; esac

kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
echo "sosd stall: all checks passed"
