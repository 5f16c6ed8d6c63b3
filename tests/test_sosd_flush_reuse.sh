#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd with several workers, FLUSHes among READs and WRITEs, each request
# resubmitted by the client as soon as it is answered (same pool index):
# a FLUSH held behind a barrier (OP_HELD in S.placed) may be released and
# answered by another worker before the accepting worker has run its
# on_request; the client reuses the request, another worker places it, and
# the first worker's on_request then takes the wrong S.placed entry (the new
# op, or NULL). sosd must stay up and answer everything.
set -u
SEG_PREFIX=sosd-flush-reuse
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"

ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "xseg create"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 2 \
	--op-timeout 20 2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
"$BIN/../tests/test_sosd_flush_reuse" --segment "$SEG" --port 5 --target-port 1 \
	--seconds 10 || fail "requests with FLUSHes on a two-worker sosd"
kill -0 $spid || fail "sosd died"
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
echo "sosd flush reuse: all checks passed"
