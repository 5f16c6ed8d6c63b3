#!/usr/bin/env bash
# A promote cut half-way, then done again. Host A lost after two verified
# passes of volume v (seeds 100, 101: the replica holds 101's blocks, the
# store neither); B's filed slowed (strace) so that the promote's
# write-back takes seconds; then, by VARIANT:
#   cli:      `xseg promote` SIGKILLed half-way; promote again;
#   blocker:  B's filed SIGKILLed half-way: the promote fails (EHOSTDOWN);
#             filed back, promote again;
#   replica:  the promoted cached SIGKILLed half-way; started again on
#             its persist file with --replica (its unit's command line):
#             refused (exit 1: the file holds the path's own data now,
#             which a replica would drop at a reset; the build before
#             started it unsure, its promote refused, ENOKEY); started
#             without --replica: an ordinary cache, written back by its
#             SIGTERM.
# Then seed 101 reads back whole through B's cache (a vlmcd on B in front
# of it) and straight from B's filed.
# Run without VARIANT, it runs each.
set -u
if [ -z "${VARIANT:-}" ]; then
	for v in cli blocker replica; do
		echo "=== variant $v"
		VARIANT=$v bash "$0" || exit 1
	done
	echo "PASS"
	exit 0
fi
MIRROR_TOTAL=${MIRROR_TOTAL:-16M}
SEG_PREFIX=cached-promote-int
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

start=$SECONDS
mirror_start
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-a.log" & vapid=$!; pids+=($vapid)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4
for s in 100 101; do
	verified_ok "$SEG" 2 write $s "$DIR/w-$s.out" --volume v
done
total=$(( ${MIRROR_TOTAL%M} << 20 ))
[ "$(pstat dirty_bytes)" = $total ] && [ "$(rstat dirty_bytes)" = $total ] ||
	fail "before the loss: primary dirty $(pstat dirty_bytes), replica $(rstat dirty_bytes), not $total"
kill -KILL "$cpid" "$spid" "$bapid" "$vapid"; wait "$cpid" "$spid" "$bapid" "$vapid" 2>/dev/null
rm -f "$PRIMARY_PF"
verified "$SEGB" 4 read 101 "$DIR/before.out" --volume v
echo "host A lost; the store: $(jfield "$DIR/before.out" corrupted) blocks not seed 101's"
[ "$(jfield "$DIR/before.out" corrupted)" -gt 0 ] || fail "the store holds seed 101 already"

strace_delay "$bbpid" pwrite64 200000
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote1.out" 2>&1 & ppid=$!
for _ in $(seq 200); do
	d=$(rstat dirty_bytes); [ "$d" -lt $total ] && [ "$d" -gt 0 ] && break; sleep 0.05
done
d=$(rstat dirty_bytes)
[ "$d" -lt $total ] && [ "$d" -gt 0 ] || fail "no promote half-way: replica dirty $d"
echo "--- half-way: $d of $total bytes still dirty; replica $(rstat replica)"
case $VARIANT in
cli)
	kill -KILL $ppid; wait $ppid 2>/dev/null
	kill "$STRACE"; wait "$STRACE" 2>/dev/null
	timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote2.out" 2>&1 ||
		fail "promote again: $(cat "$DIR/promote2.out")"
	echo "promote again: $(cat "$DIR/promote2.out")"
	;;
blocker)
	kill -KILL "$bbpid"; wait "$bbpid" 2>/dev/null
	kill "$STRACE" 2>/dev/null; wait "$STRACE" 2>/dev/null
	wait $ppid && fail "the promote succeeded with B's blocker dead: $(cat "$DIR/promote1.out")"
	echo "the promote, B's blocker dead: $(cat "$DIR/promote1.out"); $(rstat dirty_bytes) bytes dirty, replica $(rstat replica)"
	start_blocker_b
	timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote2.out" 2>&1 ||
		fail "promote again, B's blocker back: $(cat "$DIR/promote2.out")"
	echo "promote again, B's blocker back: $(cat "$DIR/promote2.out")"
	;;
replica)
	kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
	wait $ppid; echo "the first promote: $(cat "$DIR/promote1.out")"
	kill "$STRACE"; wait "$STRACE" 2>/dev/null
	# its command line (--replica) again: its file holds the path's own
	# data now, which a replica would drop at a reset
	# (it serves, on the build before: ended after 5 s)
	timeout -s KILL 5 "$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 \
		--cache-size 64M --replica --persist "$REPLICA_PF" --log-level info \
		2>> "$DIR/replica2.log"
	rc=$?
	echo "restarted with --replica: exit $rc: $(tail -1 "$DIR/replica2.log" | cut -c1-160)"
	[ $rc = 1 ] || fail "a replica started on a promoted cache's file (exit $rc)"
	"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
		--persist "$REPLICA_PF" --log-level info 2>> "$DIR/plain.log" &
	rpid=$!; pids+=($rpid)
	wait_bound_in "$SEGB" 3
	echo "restarted without --replica: dirty $(rstat dirty_bytes)"
	;;
esac
if [ $VARIANT != replica ]; then
	[ "$(rstat dirty_bytes)" = 0 ] || fail "$(rstat dirty_bytes) bytes dirty after the promote"
	[ "$(rstat replica)" = false ] || fail "still a replica"
fi
"$BIN/vlmcd" --segment "$SEGB" --port 6 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b6.log" & v6=$!; pids+=($v6)
wait_bound_in "$SEGB" 6
verified_ok "$SEGB" 6 read 101 "$DIR/c101.out" --volume v
if [ $VARIANT = replica ]; then
	kill -TERM "$v6"; wait "$v6"
	kill -TERM "$rpid"; wait "$rpid" || fail "the plain cache's stop failed"
fi
verified_ok "$SEGB" 4 read 101 "$DIR/s101.out" --volume v
echo "seed 101 whole straight from B's filed"
mirror_sanitizers
echo "PASS $VARIANT ($((SECONDS - start)) s)"
