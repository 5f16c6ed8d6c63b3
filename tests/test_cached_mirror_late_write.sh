#!/usr/bin/env bash
# A mirror write that timed out at the primary's synapsed may still land on
# the replica later, over what came after it. Segment B's heap is held (a
# client's 2M + 1M writes to a stopped nulld) so that synapsed B cannot get
# a request for the primary's 2M mirror write W1 and retries it (up to 10
# s). Synapsed A times W1 out (--timeout 3): the primary degrades, writes
# W1 back and resets the replica: the reset (a small request: it fits)
# overtook W1 at B, the primary was mirrored again at once, and a new 4K
# write W2 over W1's first bucket was mirrored and acknowledged. Then B's
# heap is freed: W1, failed long ago, landed on the replica over W2. Host A
# is lost, B is promoted: W2 must read back from B's blocker, not W1's
# older bytes.
set -u
SEG_PREFIX=cached-mirror-late
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

p=$(free_port)
LISTEN=127.0.0.1:$p REMOTE=127.0.0.1:$p
held_heap_start
"$BIN/xseg" info --segment "$SEGB" | grep heap

echo "--- W1: 2M of 'A' at 0, through the primary"
out=$(xq "$SEG" 10 3 --op write --target obj --size 2M --data A --timeout 30)
echo "W1: $out (mirror_failures $(pstat mirror_failures))"
[ "${out%% *}" = SERVED ] || fail "W1: $out"
[ "$(pstat mirror_failures)" -ge 1 ] || fail "W1 did not time out on the way to the replica"
sleep 1
echo "1 s later the primary is $(pstat mirror_state); replica_writes $(rstat replica_writes), replica dirty $(rstat dirty_bytes)"

echo "--- W2: 4K of 'B' at 0 ($(pstat mirror_state))"
out=$(xq "$SEG" 11 3 --op write --target obj --size 4K --data B --timeout 30)
[ "${out%% *}" = SERVED ] || fail "W2: $out"
echo "W2: $out; replica_writes $(rstat replica_writes), replica dirty $(rstat dirty_bytes)"

echo "--- B's heap freed"
kill -CONT "$npid"
wait "$h1" "$h2"
wait_state mirrored 15
sleep 0.5
echo "mirrored $WAITED after; replica_writes $(rstat replica_writes), replica dirty $(rstat dirty_bytes)"

echo "--- host A lost; B promoted"
kill -KILL "$cpid" "$spid" "$bapid"
wait "$cpid" "$spid" "$bapid" 2>/dev/null
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
out=$(xq "$SEGB" 14 1 --op read --target obj --size 8 --timeout 10)
echo "the first 8 bytes on B's blocker: $out"
[ "$out" = "SERVED serviced=8 data='BBBBBBBB'" ] ||
	fail "W2, acknowledged while mirrored, is lost: B's blocker holds '$out' (W1's bytes, a write that had failed long before W2, landed on the replica after it)"
mirror_sanitizers
echo "PASS"
