#!/usr/bin/env bash
# A replica's persist file holds its primary's copies, which may be older
# than the store: once the primary degraded (the link cut) it wrote newer
# versions through, and the replica keeps the older ones until the next
# reset. Only a promote may write them back, and it reads the primary's
# marker first (`degraded` here: refused). A replica crashed and started
# again WITHOUT --replica (a wrong command line) wrote them back as its
# own, with no marker read: seed 2 of volume v, acknowledged by the
# degraded primary and on the store, was written over by seed 1. The
# start must refuse such a file instead.
set -u
MIRROR_TOTAL=${MIRROR_TOTAL:-8M}
SEG_PREFIX=cached-replica-plain
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

start=$SECONDS
mirror_start
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-a.log" & pids+=($!)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b4.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4
verified_ok "$SEG" 2 write 1 "$DIR/w1.out" --volume v
echo "seed 1 mirrored: primary dirty $(pstat dirty_bytes), replica dirty $(rstat dirty_bytes)"
[ "$(rstat dirty_bytes)" -gt 0 ] || fail "the replica holds nothing"
echo "--- the link cut: the primary degrades, writes seed 1 back and seed 2 through"
kill -KILL "$spid"; wait "$spid" 2>/dev/null
verified_ok "$SEG" 2 write 2 "$DIR/w2.out" --volume v
wait_state degraded 5
for _ in $(seq 100); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
verified_ok "$SEGB" 4 read 2 "$DIR/s2.out" --volume v
held=$(rstat dirty_bytes)
echo "seed 2 on the store whole; the replica still holds $held bytes of seed 1"
[ "$held" -gt 0 ] || fail "the replica dropped seed 1 without a reset"

echo "--- the replica crashes; started again without --replica"
kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
timeout -s KILL 5 "$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
	--persist "$REPLICA_PF" --log-level info 2>> "$DIR/plain.log" &
ppid=$!
for _ in $(seq 40); do kill -0 $ppid 2>/dev/null || break; sleep 0.05; done
if kill -0 $ppid 2>/dev/null; then
	# it serves: what does it write back?
	"$BIN/xseg" policy --segment "$SEGB" --port 3 --set writethrough > /dev/null 2>&1
	verified "$SEGB" 4 read 2 "$DIR/s2-after.out" --volume v
	fail "started without --replica on a replica's file holding $held bytes; seed 2 on the store now: $(jfield "$DIR/s2-after.out" corrupted) of 2048 blocks older"
fi
wait $ppid; rc=$?
echo "the start without --replica: exit $rc: $(grep -o 'cached: --persist.*' "$DIR/plain.log" | cut -c1-200)"
[ $rc = 1 ] || fail "exit $rc, not 1"
verified_ok "$SEGB" 4 read 2 "$DIR/s2-final.out" --volume v
echo "--- started as a replica again: the promote refuses (unsure after its crash: ENOKEY)"
start_replica replica2
if timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1; then
	fail "the promote of the stale replica succeeded: $(cat "$DIR/promote.out")"
fi
verified_ok "$SEGB" 4 read 2 "$DIR/s2-end.out" --volume v
echo "seed 2 whole on the store; promote: $(cut -c1-120 "$DIR/promote.out")"
mirror_sanitizers
echo "PASS ($((SECONDS - start)) s)"
