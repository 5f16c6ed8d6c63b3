#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# Replicated write-back (issue 23) on RADOS: phase (a) of
# test_cached_mirror.sh with sosd on both segments over one pool of a real
# single-node Ceph (tools/micro-ceph, tests/ceph_lib.sh): a verified
# mirrored write load on A, every peer of A SIGKILLed and the primary's
# persist file removed, the pool lacks the data, `xseg promote` on B,
# every byte read back straight from B's sosd. Skipped, with a message,
# when the Ceph packages are missing.
set -u
SEG_PREFIX=cached-mirror-ceph
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/ceph_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"
trap 'ceph_cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT

start_sosd() {   # SEGMENT LOG
	"$BIN/sosd" --segment "$1" --port 1 --pool xseg --conf "$CONF" --threads 2 \
		--op-timeout 60 2>> "$DIR/$2" &
}
start_blocker_a() {
	start_sosd "$SEG" sosd-a.log; bapid=$!; pids+=($bapid)
	wait_bound 1
}
start_blocker_b() {
	start_sosd "$SEGB" sosd-b.log; bbpid=$!; pids+=($bbpid)
	wait_bound_in "$SEGB" 1
}

start=$SECONDS
ceph_start
echo "Ceph up in $((SECONDS - start)) s"
mirror_start
host_a_lost 1
mirror_sanitizers
echo "replicated write-back on RADOS: ok ($((SECONDS - start)) s)"
