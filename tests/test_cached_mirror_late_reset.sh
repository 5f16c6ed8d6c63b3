#!/usr/bin/env bash
# A mirror-reset that failed at the primary may still be held on the way
# and reach the replica after a later reset and the writes mirrored since:
# it dropped them, and a promote after the primary's loss lost them. Two
# "hosts" (network namespaces). B's heap is held (as
# test_cached_mirror_late_write.sh): synapsed B holds the primary's 2M
# mirror write W1, and behind it (in order, on its connection) the reset
# R1 that the primary sends once W1 timed out and it wrote W1 back. Then
# the link is cut: synapsed A closes its connection (B never sees it). The
# link comes back: A connects again, a later reset R2 answers on the new
# connection, and a 4K write W2 is mirrored and acknowledged. B's heap is
# freed (the replica stopped meanwhile, so that both reach its port before
# W1's refusal resets B's old connection): W1 and R1, both given up by the
# primary, reach the replica, or synapsed B drops them (A's new
# connection's hello supersedes the old one: B's `superseded`). Host A is
# lost, B promoted: W2 must read back from B's blocker.
set -u
SEG_PREFIX=cached-mirror-late-reset
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

netns_pair cml l
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

echo "--- W1: 2M of 'A' at 0, through the primary; it times out, the reset R1 follows it"
xq "$SEG" 10 3 --op write --target obj --size 2M --data A --timeout 30 > "$DIR/w1.out" 2>&1 &
w1=$!
wait_more "$SEG" mirror_failures 0 5
for _ in $(seq 100); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(pstat dirty_bytes)" = 0 ] || fail "W1 not written back: $(pstat dirty_bytes) dirty bytes"
sleep 0.5   # R1 sent (the next tick, once W1 is written back): B holds it behind W1
wait "$w1"
out=$(cat "$DIR/w1.out")
echo "W1: $out (mirror_failures $(pstat mirror_failures), the primary $(pstat mirror_state))"
[ "${out%% *}" = SERVED ] || fail "W1: $out"
echo "--- the link cut until A closes its connection"
ip -n "$NSA" link set "$VA" down
t_cut=$SECONDS
wait_log "$DIR/synapsed-a.log" "connection $NET.2:7000 closed" 8 ||
	fail "synapsed A did not close its connection: $(tail -3 "$DIR/synapsed-a.log")"
ip -n "$NSA" link set "$VA" up
wait_state mirrored 8
echo "mirrored again $((SECONDS - t_cut)) s after the cut; replica resets $(rstat replica_resets)"
[ "$(rstat replica_resets)" = 2 ] || fail "replica resets $(rstat replica_resets), not 2: R1 was not held"

echo "--- W2: 4K of 'B' at 0"
out=$(xq "$SEG" 11 3 --op write --target obj --size 4K --data B --timeout 30)
[ "${out%% *}" = SERVED ] || fail "W2: $out"
[ "$(pstat mirror_state)" = mirrored ] || fail "W2 was not mirrored: $(pstat mirror_state)"
echo "W2: $out; replica_writes $(rstat replica_writes), replica dirty $(rstat dirty_bytes)"
[ $((SECONDS - t_cut)) -lt 8 ] || echo "note: $((SECONDS - t_cut)) s since the cut: B may have given W1 up"

echo "--- B's heap freed, the replica stopped: what B held reaches its port, in order"
kill -STOP "$rpid"   # else W1's refusal, on the old connection, resets it before R1 goes
kill -CONT "$npid"
wait "$h1" "$h2"
sleep 1
kill -CONT "$rpid"
sleep 1
rs=$(rstat replica_resets) rr=$(rstat replica_refused) sup=$(stat_of "$SEGB" 2 superseded)
echo "replica resets $rs, writes $(rstat replica_writes), refused $rr, dirty $(rstat dirty_bytes); synapsed B superseded $sup"
[ "$rs" -ge 3 ] || [ "$rr" -ge 2 ] || [ "$sup" -ge 1 ] ||
	fail "R1 neither reached the replica nor was dropped by synapsed B as superseded (B gave it up): the test did not make the late reset"

echo "--- host A lost; B promoted"
kill -KILL "$cpid" "$spid" "$bapid"
wait "$cpid" "$spid" "$bapid" 2>/dev/null
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
out=$(xq "$SEGB" 14 1 --op read --target obj --size 8 --timeout 10)
echo "the first 8 bytes on B's blocker: $out"
[ "$out" = "SERVED serviced=8 data='BBBBBBBB'" ] ||
	fail "W2, acknowledged while mirrored, is lost: B's blocker holds '$out' (R1, a reset the primary gave up on, reached the replica after W2 and dropped it)"
mirror_sanitizers
echo "PASS"
