#!/usr/bin/env bash
# Host B (the replica's) reboots while the mirrored primary is idle: B's
# segment is made again and its replica starts with nothing it can trust
# (its persist file lost with the reboot, or no --persist). W1,
# acknowledged while mirrored, is dirty on the primary alone now, and the
# primary does not know it. The restarted replica must not vouch for what
# it does not hold:
#   promote: host A is then lost; `xseg promote` on B must refuse (the
#            replica knows no marker: no reset told it one), not report
#            success with W1 gone;
#   write:   the primary's next write W2 goes to the replica, which refuses
#            it (ESTALE) until the primary resets it: the primary degrades,
#            writes every dirty byte back (W1 read back from B's blocker),
#            resets the replica and mirrors again.
# Two hosts on one machine, as the other mirror tests (cached_mirror_lib.sh).
# Run without REBOOT_VARIANT, it runs both variants, each on its segments.
set -u
if [ -z "${REBOOT_VARIANT:-}" ]; then
	for v in promote write; do
		echo "=== variant $v"
		REBOOT_VARIANT=$v bash "$0" || exit 1
	done
	echo "PASS"
	exit 0
fi
SEG_PREFIX=cached-replica-reboot
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

w1="SERVED serviced=8 data='AAAAAAAA'"
w2="SERVED serviced=8 data='BBBBBBBB'"
store_at() { xq "$SEGB" 14 1 --op read --target obj --offset "$1" --size 8 --timeout 10; }

mirror_start
name=$(pstat mirror_marker)
echo "--- W1: 4K of 'A' at 0 of obj, through the mirrored primary"
out=$(xq "$SEG" 10 3 --op write --target obj --size 4K --data A --timeout 10)
[ "${out%% *}" = SERVED ] || fail "W1: $out"
# W1 at risk: acknowledged, dirty on the primary, held by the replica, not
# on the store
pd=$(pstat dirty_bytes) rd=$(rstat dirty_bytes)
echo "W1: $out; primary dirty $pd, replica dirty $rd, $(pstat mirror_state)"
[ "$pd" = 4096 ] || fail "the primary holds $pd dirty bytes, not W1's 4096: W1 is not at risk"
[ "$rd" = 4096 ] || fail "the replica holds $rd dirty bytes, not W1's 4096"
[ "$(pstat mirror_state)" = mirrored ] || fail "the primary is $(pstat mirror_state) after W1"
[ "$(store_at 0)" != "$w1" ] || fail "W1 is on the store already: the test shows nothing"

echo "--- host B reboots: its peers SIGKILLed, its segment made again, the replica's file lost"
kill -KILL "$rpid" "$lpid" "$bbpid"; wait "$rpid" "$lpid" "$bbpid" 2>/dev/null
rm -f "$REPLICA_PF"
"$BIN/xseg" destroy --segment "$SEGB" || fail "destroy B"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 128M || fail "create B"
start_blocker_b
if [ "$REBOOT_VARIANT" = promote ]; then
	start_replica replica2   # --persist on a file made afresh
else
	"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
		--replica --log-level info 2>> "$DIR/replica2.log" &
	rpid=$!; pids+=($rpid)
	wait_bound_in "$SEGB" 3
fi
start_listener
sleep 1
echo "after the reboot: primary $(pstat mirror_state) (dirty $(pstat dirty_bytes), $(pstat degradations) degradations); replica dirty $(rstat dirty_bytes), unsure $(rstat replica_unsure), marker '$(rstat mirror_marker)'"
[ "$(rstat dirty_bytes)" = 0 ] || fail "the rebooted replica holds $(rstat dirty_bytes) bytes"
[ "$(pstat dirty_bytes)" = 4096 ] || fail "the primary holds $(pstat dirty_bytes) dirty bytes, not W1's"

if [ "$REBOOT_VARIANT" = promote ]; then
	echo "--- host A lost; B promoted"
	kill -KILL "$cpid" "$spid" "$bapid"; wait "$cpid" "$spid" "$bapid" 2>/dev/null
	rm -f "$PRIMARY_PF"
	if timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1; then
		fail "a replica that holds nothing it can vouch for was promoted ('$(cat "$DIR/promote.out")'); W1 on the store: $(store_at 0)"
	fi
	echo "xseg promote: $(cat "$DIR/promote.out")"
	grep -q "knows no primary's marker" "$DIR/promote.out" ||
		fail "the refusal does not say why: $(cat "$DIR/promote.out")"
	grep -q -- "--force" "$DIR/promote.out" || fail "the refusal does not name --force"
	[ "$(rstat replica)" = true ] || fail "no longer a replica after a refused promote"
	[ "$(rstat promotes_refused)" = 1 ] || fail "promotes_refused is $(rstat promotes_refused)"
	echo "--- promote --force: taken (the operator's call)"
	timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 --force > "$DIR/force.out" 2>&1 ||
		fail "promote --force: $(cat "$DIR/force.out")"
	[ "$(rstat replica)" = false ] || fail "still a replica after promote --force"
else
	echo "--- W2: 4K of 'B' at 1M of obj, through the primary"
	f0=$(rstat replica_refused) m0=$(pstat marker_writes)
	out=$(xq "$SEG" 11 3 --op write --target obj --offset 1M --size 4K --data B --timeout 30)
	[ "${out%% *}" = SERVED ] || fail "W2: $out"
	echo "W2: $out; primary $(pstat mirror_state), $(pstat degradations) degradations; replica: refused $(rstat replica_refused), writes $(rstat replica_writes)"
	[ "$(pstat degradations)" -ge 1 ] ||
		fail "the primary never degraded: the rebooted replica took W2 ($(rstat replica_writes) writes), W1 is on neither it nor the store: $(store_at 0)"
	[ "$(rstat replica_refused)" -gt "$f0" ] || fail "the replica refused nothing"
	wait_state mirrored 15
	echo "mirrored again $WAITED after W2; replica resets $(rstat replica_resets)"
	[ "$(store_at 0)" = "$w1" ] || fail "W1 is not on B's blocker: $(store_at 0)"
	[ "$(store_at 1M)" = "$w2" ] || fail "W2 is not on B's blocker: $(store_at 1M)"
	[ "$(pstat dirty_bytes)" = 0 ] || fail "the primary holds $(pstat dirty_bytes) dirty bytes after the reset"
	# the marker said degraded, then mirrored again
	for _ in $(seq 100); do [ "$(pstat marker_state)" = mirrored ] && break; sleep 0.05; done
	[ "$(pstat marker_state)" = mirrored ] || fail "the marker says $(pstat marker_state) after the reset"
	[ "$(pstat marker_writes)" -ge $((m0 + 2)) ] ||
		fail "marker_writes $m0 -> $(pstat marker_writes): 'degraded' was not written"
	[ "$(rstat replica_unsure)" = false ] || fail "the replica is still unsure after the reset"
	[ "$(rstat mirror_marker)" = "$name" ] || fail "the reset did not name the marker: '$(rstat mirror_marker)'"
	echo "W1 and W2 read back straight from B's blocker"
	echo "--- W3 mirrored again"
	out=$(xq "$SEG" 12 3 --op write --target obj --offset 2M --size 4K --data C --timeout 10)
	[ "${out%% *}" = SERVED ] || fail "W3: $out"
	[ "$(rstat dirty_bytes)" = 4096 ] || fail "the replica holds $(rstat dirty_bytes) bytes after W3"
fi
mirror_sanitizers
echo "PASS ($REBOOT_VARIANT)"
