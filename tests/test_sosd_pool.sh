#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd when its pool is in trouble.
# Full (the OSD past its full ratio): librados's objecter holds every
# write of a full pool, DELETEs included, until space is freed: sosd
# answered them ETIMEDOUT after --op-timeout ("cluster down or slow?";
# never, with --op-timeout 0), and no DELETE could free the space. With
# FULL_TRY a write that grows the pool fails ENOSPC at once, an overwrite
# in place and a DELETE are served, and once there is room again every
# acknowledged byte reads back.
# Deleted under verified READs: librados answers ENOENT as for a missing
# object, and sosd served zeros (INFO size 0) for the acknowledged data.
# Every request must fail (EIO) instead; none may be served wrong.
set -u
SEG_PREFIX=sosd-pool
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"

ceph_cli() { timeout 30 ceph --conf "$CONF" --connect-timeout 10 "$@" 2>/dev/null; }
# full_ratio R: the OSD's full ratios (nearfull <= backfillfull <= full)
full_ratio() {
	local r
	for r in set-nearfull-ratio set-backfillfull-ratio set-full-ratio; do
		ceph_cli osd $r "$1" > /dev/null || fail "ceph osd $r $1"
	done
}
pool_full() { ceph_cli osd pool ls detail | grep "^pool [0-9]* 'xseg'" | grep -q "flags.*full"; }
wait_pool() {   # full|room: the OSD reports its fullness every few seconds
	local _
	for _ in $(seq 120); do
		if [ "$1" = full ]; then pool_full && return 0; else pool_full || return 0; fi
		sleep 0.25
	done
	fail "pool xseg never became $1"
}
bench() {   # op prefix extra...
	local op=$1 prefix=$2; shift 2
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix "$prefix" --op "$op" \
		--pattern rand --block-size 256K --total-size 24M --iodepth 16 --verify full \
		--json "$@"
}

ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
# A long --op-timeout: a write held by the objecter is not answered within
# the bench's --timeout.
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --op-timeout 60 \
	2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
xreq() { "$BIN/xreq" --segment "$SEG" --port 12 --target-port 1 --timeout 10 "$@"; }

echo "--- 24M acknowledged, then the pool is full (full ratio 0.5 %: 20M of 4G)"
bench write kept --timeout 60 > "$DIR/b.out" 2> "$DIR/b.err" ||
	{ cat "$DIR/b.err"; fail "writes before the pool was full"; }
xreq --op write --target doomed --data doomed > /dev/null || fail "write doomed"
full_ratio 0.005
wait_pool full
# the monitor's map first, then the OSD's: a new object fails once the OSD has it
for i in $(seq 120); do
	out=$(xreq --op write --target probe-$i --data x 2>&1) && { sleep 0.25; continue; }
	case "$out" in
	*"error=28"*) break ;;
	*) fail "a write to a full pool, not ENOSPC within 10 s (held until --op-timeout?): $out" ;;
	esac
done
case "$out" in *"error=28"*) ;; *) fail "the OSD never refused a write to the full pool" ;; esac

echo "--- new writes on the full pool: answered ENOSPC at once"
start=$SECONDS
bench write grows --timeout 10 --unacked "$DIR/grows.unacked" > "$DIR/g.out" 2> "$DIR/g.err"
rc=$?
took=$((SECONDS - start))
[ $rc -ne 3 ] && [ "$(json "$DIR/g.out" unanswered)" = 0 ] ||
	fail "writes to a full pool unanswered after 10 s (exit $rc; held until --op-timeout)"
[ "$(json "$DIR/g.out" failed)" -gt 0 ] || fail "every write to a full pool was served"
grep -q "No space left on device" "$DIR/g.err" ||
	{ head -3 "$DIR/g.err"; fail "writes to a full pool did not fail ENOSPC"; }
! grep -q "timed out" "$DIR/g.err" || fail "a write to a full pool timed out"
echo "new writes: $(json "$DIR/g.out" failed) failed ENOSPC in $took s"
out=$(xreq --op write --target grows-one --data x) && fail "a new object on a full pool: $out"
case "$out" in *"error=28"*) ;; *) fail "a new object on a full pool: $out" ;; esac

echo "--- overwrites in place and DELETEs are served: room can be made"
bench write kept --timeout 10 > "$DIR/o.out" 2> "$DIR/o.err" ||
	{ head -3 "$DIR/o.err"; fail "overwrites in place on a full pool (exit $?)"; }
out=$(xreq --op delete --target doomed) || fail "DELETE on a full pool: $out"
out=$(xreq --op info --target doomed) || fail "INFO after the DELETE: $out"
case "$out" in *"size=0"*) ;; *) fail "the DELETEd object is still there: $out" ;; esac

echo "--- room again: every acknowledged byte reads back, writes served"
full_ratio 0.95
wait_pool room
bench read kept --timeout 60 > "$DIR/r.out" 2> "$DIR/r.err" ||
	{ head -3 "$DIR/r.err"; fail "the writes acknowledged before and while full"; }
bench read grows --timeout 60 --may-differ "$DIR/grows.unacked" > "$DIR/r.out" 2> "$DIR/r.err" ||
	{ head -3 "$DIR/r.err"; fail "an acknowledged write to the full pool is lost"; }
out=$(xreq --op write --target grows-one --data x) || fail "write after room was made: $out"
grep -q "No space left on device" "$DIR/sosd.log" || fail "sosd did not log the ENOSPC"
[ "$(grep -c "No space left" "$DIR/sosd.log")" -le 10 ] ||
	fail "one warning per failed write: $(grep -c "No space left" "$DIR/sosd.log") lines"

echo "--- a pool deleted under verified READs: they fail, none is served zeros"
ceph_cli osd pool create doomed 8 8 replicated --size 1 > /dev/null || fail "create pool doomed"
"$BIN/sosd" --segment "$SEG" --port 2 --pool doomed --conf "$CONF" --op-timeout 60 \
	2> "$DIR/sosd-doomed.log" & dpid=$!
pids+=($dpid)
wait_bound 2
dbench=("$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 2 --prefix doomed
	--pattern rand --block-size 64K --total-size 8M --iodepth 8 --verify full --timeout 20 --json)
"${dbench[@]}" --op write > "$DIR/d.out" 2> "$DIR/d.err" ||
	{ cat "$DIR/d.err"; fail "writes to pool doomed"; }
# --runtime: longer than any delete takes; SIGINT ends the run after it
"${dbench[@]}" --op read --runtime 60 > "$DIR/dr.out" 2> "$DIR/dr.err" & bpid=$!
sleep 1
ceph_cli osd pool delete doomed doomed --yes-i-really-really-mean-it > /dev/null ||
	fail "delete pool doomed"
for _ in $(seq 100); do grep -q "no longer exists" "$DIR/sosd-doomed.log" && break; sleep 0.1; done
sleep 0.5
kill -0 $bpid || fail "the reads ended before the pool was deleted"
kill -INT $bpid
wait $bpid
[ "$(json "$DIR/dr.out" corrupted)" = 0 ] ||
	{ grep -m3 corrupted "$DIR/dr.err"; fail "$(json "$DIR/dr.out" corrupted) READs of a deleted pool served wrong data"; }
[ "$(json "$DIR/dr.out" failed)" -gt 0 ] || fail "no READ failed after the pool was deleted"
grep -q "Input/output error" "$DIR/dr.err" || { head -3 "$DIR/dr.err"; fail "READs did not fail EIO"; }
xd() { "$BIN/xreq" --segment "$SEG" --port 13 --target-port 2 --timeout 10 "$@"; }
for op in "info" "write --data x" "delete"; do
	out=$(xd --op $op --target doomed-1-0) && fail "$op on a deleted pool: $out"
	case "$out" in *"error=5 "*) ;; *) fail "$op on a deleted pool: $out" ;; esac
done
grep -q "pool 'doomed' (id [0-9]*) no longer exists" "$DIR/sosd-doomed.log" ||
	fail "sosd did not say the pool is gone"
kill -0 $dpid || fail "sosd died with its pool"

kill -TERM $spid $dpid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
wait $dpid; rc=$?
[ $rc -eq 0 ] || fail "sosd of the deleted pool exited $rc on SIGTERM"
echo "sosd pool: all checks passed"
