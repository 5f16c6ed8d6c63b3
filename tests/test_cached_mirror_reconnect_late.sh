#!/usr/bin/env bash
# A mirror write that failed at the primary because its link broke may
# still be held by the replica's synapsed on the old connection, which B
# never saw close (the cut dropped everything), and submitted after the
# reset that came on the new connection. Two "hosts" (network namespaces,
# as test_cached_mirror_netns.sh). B's heap is held (a 2M + 1M write to a
# stopped nulld, as test_cached_mirror_late_write.sh) so that synapsed B
# holds the primary's 2M mirror write W1, retrying it. The link is cut:
# synapsed A fails W1 and closes its connection, the primary degrades and
# writes W1 back. The link comes back: A connects again, the reset goes on
# the new connection and answers, and a 4K write W2 over W1's first bucket
# is mirrored and acknowledged. Then B's heap is freed: W1, given up long
# ago, must not land on the replica over W2: synapsed B drops it (A's new
# connection's hello supersedes the old one: B's `superseded`), or the
# replica refuses it by its tag. Host A is lost, B promoted: W2 must read
# back from B's blocker.
set -u
SEG_PREFIX=cached-mirror-reconnect
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

netns_pair cmr r
RUN_A="ip netns exec $NSA" RUN_B="ip netns exec $NSB"
LISTEN=$NET.2:7000 REMOTE=$NET.2:7000
# A notices the cut within a second or two (keepalive, TCP_USER_TIMEOUT);
# B (default --timeout 30) not for 11 s
start_sender() {
	$RUN_A "$BIN/synapsed" --segment "$SEG" --port 5 --remote "$REMOTE" --timeout 1 \
		--log-level info 2>> "$DIR/synapsed-a.log" & spid=$!; pids+=($spid)
	wait_bound 5
}

held_heap_start

echo "--- W1: 2M of 'A' at 0, through the primary; the link cut once B holds it"
xq "$SEG" 10 3 --op write --target obj --size 2M --data A --timeout 30 > "$DIR/w1.out" 2>&1 &
w1=$!
sleep 0.5
ip -n "$NSA" link set "$VA" down
t_cut=$SECONDS
wait_log "$DIR/synapsed-a.log" "connection $NET.2:7000 closed" 8 ||
	fail "synapsed A did not close its connection: $(tail -3 "$DIR/synapsed-a.log")"
ip -n "$NSA" link set "$VA" up
wait "$w1"
out=$(cat "$DIR/w1.out")
echo "W1: $out (mirror_failures $(pstat mirror_failures))"
[ "${out%% *}" = SERVED ] || fail "W1: $out"
wait_state mirrored 8
echo "mirrored again $((SECONDS - t_cut)) s after the cut; replica resets $(rstat replica_resets)"

echo "--- W2: 4K of 'B' at 0"
out=$(xq "$SEG" 11 3 --op write --target obj --size 4K --data B --timeout 30)
[ "${out%% *}" = SERVED ] || fail "W2: $out"
[ "$(pstat mirror_state)" = mirrored ] || fail "W2 was not mirrored: $(pstat mirror_state)"
echo "W2: $out; replica_writes $(rstat replica_writes), replica dirty $(rstat dirty_bytes)"
[ $((SECONDS - t_cut)) -lt 8 ] || echo "note: $((SECONDS - t_cut)) s since the cut: B may have given W1 up"

echo "--- B's heap freed"
kill -CONT "$npid"
wait "$h1" "$h2"
sleep 1
rw=$(rstat replica_writes) rr=$(rstat replica_refused) sup=$(stat_of "$SEGB" 2 superseded)
echo "replica_writes $rw, refused $rr, dirty $(rstat dirty_bytes); synapsed B superseded $sup"
[ $((rw + rr)) -ge 2 ] || [ "$sup" -ge 1 ] ||
	fail "W1 neither reached the replica nor was dropped by synapsed B as superseded (B gave it up): the test did not make the late write"

echo "--- host A lost; B promoted"
kill -KILL "$cpid" "$spid" "$bapid"
wait "$cpid" "$spid" "$bapid" 2>/dev/null
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
out=$(xq "$SEGB" 14 1 --op read --target obj --size 8 --timeout 10)
echo "the first 8 bytes on B's blocker: $out"
[ "$out" = "SERVED serviced=8 data='BBBBBBBB'" ] ||
	fail "W2, acknowledged while mirrored, is lost: B's blocker holds '$out' (W1, failed at A when the link broke, landed on the replica after the reset that came on the new connection)"
mirror_sanitizers
echo "PASS"
