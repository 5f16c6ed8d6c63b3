#!/usr/bin/env bash
# A replica whose persist file was not closed clean (killed; a host crash
# alike) may have lost its primary's cleans: the kernel kept a version the
# primary wrote back and then overwrote on the store, not the clear of it,
# and a promote would write that older version back. Restarted on such a
# file it trusts nothing it recovered until the primary resets it: it
# refuses `xseg promote` (its marker name forgotten) and mirrored writes
# (ESTALE: the primary degrades, writes everything back and resets it);
# after the reset it mirrors again and knows the marker. Every write stays
# acknowledged and reads back.
set -u
SEG_PREFIX=cached-replica-unclean
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

mirror_start
name=$(pstat mirror_marker)
verified_ok "$SEG" 3 write 1 "$DIR/w1.out"
rd=$(rstat dirty_bytes)
[ "$rd" -gt 0 ] || fail "the replica holds nothing dirty: the test shows nothing"
[ "$(rstat mirror_marker)" = "$name" ] || fail "the replica does not know the marker '$name'"

echo "--- the replica SIGKILLed (its file not closed clean) and restarted on it"
kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
start_replica replica2
wait_log "$DIR/replica2.log" "not trusted until the primary resets it"
[ "$(rstat replica_unsure)" = true ] || fail "replica_unsure is $(rstat replica_unsure)"
[ "$(rstat mirror_marker)" = "" ] || fail "the unsure replica still names the marker '$(rstat mirror_marker)'"
[ "$(rstat dirty_bytes)" = "$rd" ] || fail "recovered $(rstat dirty_bytes) of $rd dirty bytes"

echo "--- promote before the primary reset it: refused, still a replica"
if timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1; then
	fail "an unsure replica was promoted: $(cat "$DIR/promote.out")"
fi
[ "$(rstat promote_marker_said)" = unknown ] || fail "promote_marker_said is $(rstat promote_marker_said)"
[ "$(rstat replica)" = true ] || fail "no longer a replica after a refused promote"

echo "--- the primary's next writes: refused there, so it degrades, writes back, resets it"
verified_ok "$SEG" 3 write 2 "$DIR/w2.out"
wait_state mirrored 15
echo "mirrored again $WAITED after the writes ($(pstat degradations) degradations)"
[ "$(pstat degradations)" -ge 1 ] || fail "the primary never degraded: the replica took its writes"
[ "$(rstat replica_unsure)" = false ] || fail "still unsure after the reset"
[ "$(rstat mirror_marker)" = "$name" ] || fail "the reset did not name the marker: '$(rstat mirror_marker)'"
verified_ok "$SEG" 3 read 1 "$DIR/r1.out"
verified_ok "$SEG" 3 read 2 "$DIR/r2.out"
mirror_sanitizers
echo "PASS"
