#!/usr/bin/env bash
# A promoted replica is an ordinary write-back cache: what its clients
# write is dirty in its persist file alone until written back. Crashed
# (SIGKILL) and started again by the same command line (its unit says
# --replica), it took that data for its primary's, to be dropped by the
# next reset: host A back, a new primary resets it, and writes the
# promoted cache acknowledged (seed 200 of volume v, written through a
# vlmcd on B) are gone from everywhere. The start must refuse such a file
# instead (its data is the path's own, not a primary's copy).
set -u
MIRROR_TOTAL=${MIRROR_TOTAL:-8M}
SEG_PREFIX=cached-promoted-rr
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

start=$SECONDS
mirror_start
echo "--- host A lost, B promoted"
kill -KILL "$cpid" "$spid" "$bapid"; wait "$cpid" "$spid" "$bapid" 2>/dev/null
rm -f "$PRIMARY_PF"
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
"$BIN/vlmcd" --segment "$SEGB" --port 6 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b6.log" & v6=$!; pids+=($v6)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b4.log" & pids+=($!)
wait_bound_in "$SEGB" 6; wait_bound_in "$SEGB" 4
verified_ok "$SEGB" 6 write 200 "$DIR/w200.out" --volume v
d=$(rstat dirty_bytes)
verified "$SEGB" 4 read 200 "$DIR/s-before.out" --volume v
c=$(jfield "$DIR/s-before.out" corrupted)
echo "seed 200 through the promoted cache: dirty $d, the store lacks $c blocks of it"
[ "$d" -gt 0 ] && [ "$c" -gt 0 ] || fail "seed 200 is not at risk (dirty $d, store lacks $c)"

echo "--- the promoted cache crashes; started again by its command line (--replica)"
kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
kill -TERM "$v6"; wait "$v6" 2>/dev/null
"$BIN/cached" --persist-inspect "$REPLICA_PF" --json > "$DIR/inspect.out" 2>&1
echo "its file: role '$(jfield "$DIR/inspect.out" role)', dirty $(jfield "$DIR/inspect.out" dirty_bytes)"
"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
	--replica --persist "$REPLICA_PF" --log-level info 2>> "$DIR/replica2.log" & rpid=$!
for _ in $(seq 100); do
	kill -0 $rpid 2>/dev/null || break
	"$BIN/xseg" info --segment "$SEGB" --json --all 2>/dev/null | grep -q '"port":3,[^}]*"owner_pid":'"$rpid" && break
	sleep 0.05
done
if kill -0 $rpid 2>/dev/null; then
	pids+=($rpid)
	echo "started as a replica: dirty $(rstat dirty_bytes), unsure $(rstat replica_unsure)"
	echo "--- host A back: a new primary mirrors to it"
	start_blocker_a
	start_sender
	start_primary
	wait_state mirrored 10
	echo "replica after the new primary's reset: dirty $(rstat dirty_bytes), resets $(rstat replica_resets)"
	rd=$(rstat dirty_bytes)
	verified "$SEGB" 4 read 200 "$DIR/s-after.out" --volume v
	c=$(jfield "$DIR/s-after.out" corrupted)
	[ "$c" = 0 ] || [ "$rd" -gt 0 ] ||
		fail "seed 200, acknowledged by the promoted cache: $c blocks lost (its file's data dropped by a primary's reset)"
	fail "started as a replica on a promoted cache's file holding $d dirty bytes"
fi
wait $rpid; rc=$?
echo "the start on the file with --replica: exit $rc: $(grep -i "promoted\|refus" "$DIR/replica2.log" | tail -1)"
[ $rc = 1 ] || fail "exit $rc, not 1"
grep -q "persist.*promoted" "$DIR/replica2.log" || fail "the refusal does not say why"
echo "--- started without --replica: written back"
"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
	--persist "$REPLICA_PF" --log-level info 2>> "$DIR/plain.log" & rpid=$!; pids+=($rpid)
wait_bound_in "$SEGB" 3
"$BIN/vlmcd" --segment "$SEGB" --port 6 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2>> "$DIR/vlmcd-b6.log" & v6=$!; pids+=($v6)
wait_bound_in "$SEGB" 6
verified_ok "$SEGB" 6 read 200 "$DIR/c-final.out" --volume v   # after its persist check
kill -TERM "$v6"; wait "$v6" 2>/dev/null
kill -TERM "$rpid"; wait "$rpid" || fail "the plain cache's stop failed"
verified_ok "$SEGB" 4 read 200 "$DIR/s-final.out" --volume v
echo "seed 200 whole straight from B's filed"
mirror_sanitizers
echo "PASS ($((SECONDS - start)) s)"
