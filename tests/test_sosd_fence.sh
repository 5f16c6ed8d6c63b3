#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd --fence: an earlier sosd's writes cannot land after its
# successor's acknowledged ones. RADOS does not fence a client on its own:
# a sosd that is gone to its path (hung here: SIGSTOPped; or killed with
# writes still in a socket to a stalled OSD, as a review showed) writes
# when it comes back, over what the new sosd acknowledged since.
# Through vlmcd (both rounds over the same blocks of one volume): round 1
# through sosd A; A stopped; sosd B started on another port with the same
# --fence, round 2 through B (acknowledged); A continued and round 3 sent
# through it. With --fence B blocklisted A and broke its lock before it
# served: every write of A fails (ESHUTDOWN) and round 2 reads back
# whole through B. SOSD_FENCE_OFF=1 runs it without --fence, as sosd ran
# before: A's round 3 lands over round 2, and the test fails.
# Also: a clean stop gives the lock back (the next sosd fences nobody), and
# a bad --fence name is refused at start.
set -u
SEG_PREFIX=sosd-fence
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"

FENCE=(--fence path-a)
[ "${SOSD_FENCE_OFF:-}" = 1 ] && FENCE=()
bench() {   # PORT op seed extra...: volume a through the vlmcd on PORT
	local port=$1 op=$2 seed=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$port" --volume a \
		--op "$op" --pattern rand --total-size 4M --block-size 64K --iodepth 8 --seed "$seed" \
		--verify full --timeout 20 --json "$@"
}
start_sosd() {   # PORT LOG
	"$BIN/sosd" --segment "$SEG" --port "$1" --pool xseg --conf "$CONF" --op-timeout 5 \
		"${FENCE[@]}" --log-level info 2> "$DIR/$2" & spid=$!
	pids+=($spid)
	wait_bound "$1"
	for _ in $(seq 150); do   # it binds its port before it connects
		grep -q "serving pool" "$DIR/$2" && return 0
		kill -0 "$spid" 2> /dev/null || fail "sosd on port $1 exited: $(tail -2 "$DIR/$2")"
		sleep 0.1
	done
	fail "sosd on port $1 did not serve within 15 s"
}

expect_exit 2 "$BIN/sosd" --segment x --port 1 --pool xseg --conf /etc/hostname --fence .x
ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 128M > /dev/null || fail "create"
start_sosd 1 sosd-a.log; apid=$spid
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume a:4M --object-size 1M \
	2> "$DIR/vlmcd-a.log" & pids+=($!)
wait_bound 2
"$BIN/vlmcd" --segment "$SEG" --port 4 --blocker-port 3 --volume a:4M --object-size 1M \
	2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 4

echo "--- round 1 through sosd A; A stops answering; sosd B takes over"
bench 2 write 1 > "$DIR/w1.out" 2> "$DIR/w1.err" || fail "round 1: $(tail -1 "$DIR/w1.err")"
kill -STOP "$apid"
start_sosd 3 sosd-b.log; bpid=$spid
if [ ${#FENCE[@]} -gt 0 ]; then
	grep -q "held it (an earlier sosd): blocklisted" "$DIR/sosd-b.log" ||
		fail "sosd B did not say it fenced A: $(grep -E 'WARN|ERROR' "$DIR/sosd-b.log" | tail -1)"
	[ "$(peer_stat 3 fenced_holders)" = 1 ] || fail "B's stats: fenced_holders $(peer_stat 3 fenced_holders)"
fi
bench 4 write 2 > "$DIR/w2.out" 2> "$DIR/w2.err" || fail "round 2 through B: $(tail -1 "$DIR/w2.err")"

echo "--- A comes back and writes round 3"
kill -CONT "$apid"
bench 2 write 3 --timeout 10 > "$DIR/w3.out" 2> "$DIR/w3.err"
echo "round 3 through A: served $(($(json "$DIR/w3.out" requests) - $(json "$DIR/w3.out" failed)))" \
     "of $(json "$DIR/w3.out" requests)"
bench 4 read 2 > "$DIR/r2.out" 2> "$DIR/r2.err"
echo "round 2 through B: failed $(json "$DIR/r2.out" failed), corrupted $(json "$DIR/r2.out" corrupted)"
[ "$(json "$DIR/r2.out" corrupted)" = 0 ] && [ "$(json "$DIR/r2.out" failed)" = 0 ] ||
	fail "round 2, acknowledged through B, was overwritten by the earlier sosd A"
[ "$(json "$DIR/w3.out" failed)" = "$(json "$DIR/w3.out" requests)" ] ||
	fail "A served writes after B fenced it"
grep -q "blocklisted this client" "$DIR/sosd-a.log" || fail "A's warnings do not say it is blocklisted"

echo "--- a clean stop gives the lock back"
kill -KILL "$apid"
kill -TERM "$bpid"; wait "$bpid" 2> /dev/null
start_sosd 3 sosd-c.log
[ "$(peer_stat 3 fenced_holders)" = 0 ] || fail "B stopped clean, and C still fenced a holder"
bench 4 read 2 > "$DIR/r2c.out" 2> "$DIR/r2c.err" || fail "round 2 through C: $(tail -1 "$DIR/r2c.err")"
echo "sosd --fence: the earlier sosd fenced, every acknowledged byte kept: ok"
