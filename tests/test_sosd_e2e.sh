#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# The full path on RADOS: bench-xseg -> vlmcd -> cached (write-back, then
# write-through) -> sosd -> a real single-node Ceph, --verify full. The OSD
# is restarted under load in both cases (write-through: while the client
# writes; write-back: cached gets SIGTERM, so writes back, with the OSD
# down and waits for it to return): no request hangs
# (bench-xseg --timeout), none fails, and after the cache is gone every byte
# read straight through vlmcd -> sosd is what was written.
set -u
SEG_PREFIX=sosd-e2e
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"

bench() {   # volume op pattern extra...
	local vol=$1 op=$2 pattern=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume "$vol" --op "$op" \
		--pattern "$pattern" --verify full --timeout 90 --json "$@" \
		> "$DIR/bench.out" 2> "$DIR/bench.err" ||
		{ cat "$DIR/bench.err"; tail -1 "$DIR/bench.out"; fail "bench-xseg $vol $op $pattern $*"; }
	tail -1 "$DIR/bench.out" | grep -q '"failed":0,"corrupted":0' ||
		fail "bench-xseg $vol $op $pattern: failures"
}

osd_restart() {
	"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop"
	sleep 1
	"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start"
}

start_cached() {   # policy
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
		--object-size 4M --write-policy "$1" --threads 2 2> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
}

ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 256M || fail "create"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 2 \
	--op-timeout 60 2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume wb:48M --volume wt:48M \
	--object-size 4M 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2

echo "--- write-through, OSD restarted while the client writes"
start_cached writethrough
bench wt write rand --total-size 32M --block-size 4K --iodepth 16 --seed 1 & bpid=$!
sleep 0.5
kill -0 $bpid || fail "the writer ended before the outage began"
osd_restart
wait $bpid || fail "writes across the restart"
bench wt read rand --total-size 32M --block-size 16K --iodepth 16 --seed 1
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug write-through"
kill -TERM $cpid; wait $cpid || fail "cached (write-through) exit"
bench wt read seq --total-size 32M --block-size 64K --iodepth 8 --seed 1

echo "--- write-back (cache larger than the workload), OSD restarted during write-back"
start_cached writeback
bench wb write rand --total-size 32M --block-size 16K --iodepth 16 --seed 2
bench wb read rand --total-size 32M --block-size 4K --iodepth 16 --seed 2
dirty=$(peer_stat 3 dirty_bytes)
[ "$dirty" -gt 0 ] || fail "write-back held nothing dirty"
"$BIN/xseg" route --segment "$SEG" --port 1 --clear   # off the path; SIGTERM writes back
"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop"
kill -TERM $cpid
sleep 1
kill -0 $cpid || fail "cached ended its write-back with the OSD down"
"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start"
wait $cpid || { tail -20 "$DIR/cached.log"; fail "cached did not write back across the restart"; }
bench wb read seq --total-size 32M --block-size 64K --iodepth 8 --seed 2
bench wt read rand --total-size 32M --block-size 64K --iodepth 8 --seed 1
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
echo "sosd e2e: every byte verified"
