#!/usr/bin/env bash
# The stale-replica marker: a primary whose link to its replica is cut
# goes on answering writes through to the store, and says so in its
# marker on the store before it answers the first. Host A is then lost.
# `xseg promote` of the replica, which still holds the older mirrored
# data dirty, must refuse (exit 1, the replica keeps everything), or it
# writes that older data over acknowledged writes: every block of the
# later write reads back from B's store after the refusal (through a
# vlmcd volume: its blocks keep their names whatever the seed). `promote
# --force` then shows what the refusal saved: it does write the older
# blocks back (the data really was at risk).
set -u
SEG_PREFIX=cached-marker
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

mirror_start
for _ in $(seq 200); do [ "$(pstat marker_state)" = mirrored ] && break; sleep 0.05; done
[ "$(pstat marker_state)" = mirrored ] || fail "the primary's marker is '$(pstat marker_state)', not mirrored"
name=$(pstat mirror_marker)
[ -n "$name" ] && [ "$(rstat mirror_marker)" = "$name" ] ||
	fail "the replica knows the marker as '$(rstat mirror_marker)', the primary as '$name'"
echo "marker '$name' says mirrored; the replica learned its name from the reset"
# The default name says the segment too: two primaries on one port of two
# segments of a host shared one, and one's `mirrored` let the other's
# stale replica be promoted (a review: 8M of older data over acknowledged
# writes).
case "$name" in
*".$SEG.3") ;;
*) fail "the default marker '$name' does not name the primary's segment $SEG" ;;
esac
# One volume through vlmcd on each side (its object names do not change
# with the seed: seed 2 overwrites seed 1's blocks).
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:8M --object-size 4M \
	2> "$DIR/vlmcd-a.log" & vapid=$!; pids+=($vapid)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:8M --object-size 4M \
	2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4

echo "--- seed 1 through the mirrored primary: both caches hold it dirty"
verified_ok "$SEG" 2 write 1 "$DIR/w1.out" --volume v
rd=$(rstat dirty_bytes)
[ "$rd" -gt 0 ] || fail "the replica holds nothing dirty: the test shows nothing"

echo "--- the link cut (A's synapsed SIGKILLed): the primary degrades"
kill -KILL "$spid"; wait "$spid" 2>/dev/null
wait_state degraded 10
echo "--- seed 2 over the same blocks, acknowledged by the degraded primary"
verified_ok "$SEG" 2 write 2 "$DIR/w2.out" --volume v
[ "$(pstat marker_state)" = degraded ] || fail "the primary answered with its marker '$(pstat marker_state)'"
[ "$(rstat dirty_bytes)" = "$rd" ] || fail "the replica's dirty bytes moved: $rd -> $(rstat dirty_bytes)"
echo "primary: marker degraded ($(pstat marker_writes) marker writes, $(pstat marker_held) answers held for it)"

echo "--- host A lost: the primary and A's store SIGKILLed"
kill -KILL "$cpid" "$bapid" "$vapid"; wait "$cpid" "$bapid" "$vapid" 2>/dev/null
rm -f "$PRIMARY_PF"
verified_ok "$SEGB" 4 read 2 "$DIR/before.out" --volume v

echo "--- xseg promote of the stale replica: refused"
if timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1; then
	fail "promote of a replica its primary went on without succeeded: $(cat "$DIR/promote.out")"
fi
echo "xseg promote: $(cat "$DIR/promote.out")"
grep -q "refused" "$DIR/promote.out" || fail "promote did not say it refused: $(cat "$DIR/promote.out")"
[ "$(rstat replica)" = true ] || fail "no longer a replica after a refused promote"
[ "$(rstat promotes_refused)" = 1 ] || fail "promotes_refused is $(rstat promotes_refused)"
[ "$(rstat promote_marker_said)" = degraded ] || fail "promote_marker_said is $(rstat promote_marker_said)"
[ "$(rstat dirty_bytes)" = "$rd" ] || fail "the refused promote changed what the replica holds"
# the name is in its persist file too: a restart of the replica keeps it
"$BIN/cached" --persist-inspect "$REPLICA_PF" --json > "$DIR/inspect.out" 2>&1
grep -q "\"mirror_marker\":\"$name\"" "$DIR/inspect.out" ||
	fail "the replica's persist file does not name the marker: $(cat "$DIR/inspect.out")"
verified_ok "$SEGB" 4 read 2 "$DIR/after-refusal.out" --volume v
echo "every acknowledged block of seed 2 reads back from B's store"

echo "--- promote --force: what the refusal kept from happening"
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 --force > "$DIR/force.out" 2>&1 ||
	fail "promote --force: $(cat "$DIR/force.out")"
verified "$SEGB" 4 read 2 "$DIR/forced.out" --volume v
c=$(jfield "$DIR/forced.out" corrupted) || fail "no result after the forced promote"
[ "$c" -gt 0 ] || fail "the forced promote changed no block: the data was not at risk"
echo "the forced promote wrote $c blocks of the older seed 1 over acknowledged writes"
mirror_sanitizers
echo "PASS"
