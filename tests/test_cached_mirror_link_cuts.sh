#!/usr/bin/env bash
# Replicated write-back under verified write load while the link between
# the two "hosts" (network namespaces joined by a veth pair, as
# test_cached_mirror_netns.sh) is cut and restored $CUTS times, then host
# A lost. Two kinds of cut, in turn: A's end of the veth pair set down
# (A's sends fail at once: "Network is unreachable" or "Connection timed
# out"), and a blackhole route on B to A's address (A hears nothing, its
# data never acknowledged: "Connection timed out"). Either way synapsed
# A's connection breaks (TCP_USER_TIMEOUT, its --timeout 1: the log says
# "closed"), B does not see it close at the time; the link back, A
# connects anew. Each cut: the primary degrades (a mirror write fails),
# writes its dirty bytes back and writes through, then resets the replica
# on the new connection and is mirrored again. The moments of the cuts
# and how long the link stays down are drawn at random (printed).
#   The load, through vlmcds on A (one name, new data per seed): a filler
# writes volume w throughout (its mirror writes are the ones the cuts
# break, it writes through while degraded and across every reset), and
# volume v is written by seed K between the (K-1)th resync and cut K,
# each seed over less of it (seed K over the first (CUTS + 2 - K) * STEP M).
# Seed K is in the caches alone when the link is cut (the store lacks
# every block of it: read straight from B's filed), and the primary's
# write-back at the cut must put it on the store whole, since nothing
# writes it there again. The last seed is in the caches alone (dirty in
# both) when every peer of A is SIGKILLed (its persist file removed, the
# store lacks it: both filed peers share it), `xseg promote` on B; then
# v, straight from B's filed (a vlmcd on B), holds each seed exactly
# where it was written last, and w the filler's.
# Skipped, with a message, where namespaces cannot be made.
set -u
SEG_PREFIX=cached-mirror-cuts
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

netns_pair cmc c
RUN_A="ip netns exec $NSA" RUN_B="ip netns exec $NSB"
LISTEN=$NET.2:7000 REMOTE=$NET.2:7000
# 4 cuts, each seed 4M less (3 and 2M under a sanitizer: SCALE < 1)
CUTS=${MIRROR_CUTS:-$(python3 -c "print(4 if $SCALE >= 1 else 3)")}
STEP=$(python3 -c "print(4 if $SCALE >= 1 else 2)") LAST=$((CUTS + 1)) FILLER=99
# A gives its connection up within a second or two of a cut (keepalive,
# TCP_USER_TIMEOUT), its mirror writes fail after one
start_sender() {
	$RUN_A "$BIN/synapsed" --segment "$SEG" --port 5 --remote "$REMOTE" --timeout 1 \
		--log-level info 2>> "$DIR/synapsed-a.log" & spid=$!; pids+=($spid)
	wait_bound 5
}
# size SEED: how much of v seed SEED writes, in M
size() { echo $(( (LAST + 1 - $1) * STEP )); }
store_read() {   # SEED OUT [options]: v straight from B's filed
	verified "$SEGB" 4 read "$1" "$2" --volume v --total-size "$(size "$1")M" "${@:3}"
}
cache_read() {   # SEED OUT: v through B's promoted cached
	if [ -z "${vcpid:-}" ]; then
		"$BIN/vlmcd" --segment "$SEGB" --port 6 --blocker-port 3 --volume v:$(size 1)M \
			--object-size 4M 2> "$DIR/vlmcd-b3.log" & vcpid=$!; pids+=($vcpid)
		wait_bound_in "$SEGB" 6
	fi
	verified "$SEGB" 6 read "$1" "$2" --volume v --total-size "$(size "$1")M"
}
# every older seed where no later one wrote over it, its blocks exactly;
# the filler's volume whole
after_promote() {
	local k want
	for k in $(seq "$CUTS"); do
		store_read "$k" "$DIR/v-$k.out" --differing "$DIR/v-$k.differ"
		want="0 $(( $(size $((k + 1))) * 256 ))"
		[ "$(jfield "$DIR/v-$k.out" failed)" = 0 ] && [ "$(sed 1d "$DIR/v-$k.differ")" = "$want" ] ||
			fail "seed $k: the blocks not of it are '$(sed 1d "$DIR/v-$k.differ" | head -3 | tr '\n' ' ')'," \
				"not '$want' (the first $(size $((k + 1)))M, seed $((k + 1))'s): $(tail -1 "$DIR/v-$k.out")"
	done
	verified_ok "$SEGB" 4 read "$FILLER" "$DIR/w.out" --volume w --total-size 4M
	echo "v straight from B's filed: each seed where it was written last; w the filler's"
}

# cut K / heal K: the link cut the Kth time, and back
cut() {
	if [ $(($1 % 2)) = 1 ]; then ip -n "$NSA" link set "$VA" down
	else ip -n "$NSB" route add blackhole "$NET.1/32"; fi
}
heal() {
	if [ $(($1 % 2)) = 1 ]; then ip -n "$NSA" link set "$VA" up
	else ip -n "$NSB" route del blackhole "$NET.1/32"; fi
}
cut_kind() { [ $(($1 % 2)) = 1 ] && echo "A's veth end down" || echo "B's blackhole to A"; }

# log_count FILE TEXT: lines of FILE holding TEXT.
log_count() { grep -c -- "$2" "$1" 2>/dev/null || true; }
# wait_log_more FILE TEXT THAN SECONDS: more than THAN lines hold TEXT.
wait_log_more() {
	for _ in $(seq $(( $4 * 20 ))); do
		[ "$(log_count "$1" "$2")" -gt "$3" ] && return 0
		sleep 0.05
	done
	fail "'$2' in $(basename "$1") stayed at $3 lines for $4 s"
}
# v_write SEED: seed SEED's verified passes over its part of v, from port
# 10, until writer_stop; returns once some of them are mirrored.
v_write() {
	writer "$1" 10 --target-port 2 --volume v --total-size "$(size "$1")M" & wpid=$!
	wait_more "$SEGB" replica_writes "$(rstat replica_writes)" 10
}
# store_lacks SEED: no block of SEED's is on the store yet.
store_lacks() {
	local c f
	store_read "$1" "$DIR/lacks-$1.out"
	c=$(jfield "$DIR/lacks-$1.out" corrupted) f=$(jfield "$DIR/lacks-$1.out" failed) ||
		fail "no result reading seed $1 from B's filed: $(tail -2 "$DIR/lacks-$1.out.err")"
	[ $((c + f)) = $(( $(size "$1") * 256 )) ] ||
		fail "seed $1 is on the store before its cut: $(tail -1 "$DIR/lacks-$1.out")"
}

start=$SECONDS
mirror_start
wait_log "$DIR/synapsed-b.log" "connection from $NET.1:"
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:$(size 1)M --volume w:4M \
	--object-size 4M 2> "$DIR/vlmcd-a.log" & vapid=$!; pids+=($vapid)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:$(size 1)M --volume w:4M \
	--object-size 4M 2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4
closed="connection $NET.2:7000 closed" connected="connected to $NET.2:7000"

writer "$FILLER" 12 --target-port 2 --volume w --total-size 4M & fpid=$!
for k in $(seq "$CUTS"); do
	v_write "$k"
	writer_stop "$k" "$wpid"
	pd=$(pstat dirty_bytes)
	[ "$pd" -ge $(( $(size "$k") << 20 )) ] ||
		fail "seed $k: the primary holds $pd dirty bytes, not its $(size "$k")M"
	store_lacks "$k"
	deg=$(pstat degradations) res=$(rstat replica_resets) mf=$(pstat mirror_failures)
	nclosed=$(log_count "$DIR/synapsed-a.log" "$closed")
	nconn=$(log_count "$DIR/synapsed-a.log" "$connected")
	# a random moment of the filler's load; the link kept down a random
	# while after A gave its connection up (the resets fail meanwhile)
	pause=0.$((RANDOM % 5))$((RANDOM % 10)) extra=0.$((RANDOM % 10))
	sleep "$pause"
	echo "--- cut $k, $(cut_kind "$k") (after ${pause} s, ${extra} s more than A's close):" \
		"primary dirty $(pstat dirty_bytes), seed $k's $(size "$k")M in the caches alone"
	cut "$k" || fail "cut $k: could not cut the link ($(cut_kind "$k"))"
	t_cut=$(date +%s%N)
	wait_log_more "$DIR/synapsed-a.log" "$closed" "$nclosed" 10
	writer_alive "$FILLER" "$fpid" "cut $k"
	wait_state degraded 5
	# written back at once: what stays dirty was written through since
	for _ in $(seq 100); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
	[ "$(pstat dirty_bytes)" = 0 ] || fail "cut $k: degraded, yet $(pstat dirty_bytes) bytes stay dirty"
	store_read "$k" "$DIR/cut-$k.out"
	intact "$DIR/cut-$k.out" "cut $k: seed $k straight from B's filed once written back"
	sleep "$extra"
	heal "$k" || fail "cut $k: could not restore the link ($(cut_kind "$k"))"
	wait_state mirrored 10
	t_up=$(date +%s%N)
	[ "$(pstat degradations)" -gt "$deg" ] || fail "cut $k: degradations stayed at $deg"
	[ "$(pstat mirror_failures)" -gt "$mf" ] || fail "cut $k: no mirror write failed (mirror_failures $mf)"
	[ "$(rstat replica_resets)" -gt "$res" ] || fail "cut $k: mirrored again, yet the replica took no reset"
	[ "$(log_count "$DIR/synapsed-a.log" "$connected")" -gt "$nconn" ] ||
		fail "cut $k: mirrored again, yet synapsed A did not connect anew: $(tail -3 "$DIR/synapsed-a.log")"
	echo "cut $k: A's connection $(grep -- "$closed" "$DIR/synapsed-a.log" | tail -1 | sed 's/.*closed: //');" \
		"seed $k written back whole; mirrored again $(( (t_up - t_cut) / 1000000 )) ms after the cut;" \
		"degradations $(pstat degradations), replica resets $(rstat replica_resets), refused $(rstat replica_refused)"
	writer_alive "$FILLER" "$fpid" "mirrored again after cut $k"
done
v_write "$LAST"
writer_stop "$LAST" "$wpid"
writer_stop "$FILLER" "$fpid"
[ "$(pstat mirror_state)" = mirrored ] || fail "the primary is $(pstat mirror_state) after the last seed's load"
nfrom=$(log_count "$DIR/synapsed-b.log" "connection from $NET.1:")
[ "$nfrom" -gt "$CUTS" ] || fail "synapsed B took $nfrom connections for $CUTS cuts"
echo "$CUTS cuts: synapsed B took $nfrom connections, saw $(log_count "$DIR/synapsed-b.log" "connection $NET.1:[0-9]* closed") close;" \
	"degraded $(pstat degraded_ms_total) ms in all;" \
	"replica writes $(rstat replica_writes), refused $(rstat replica_refused)"

A_MORE_PIDS=$vapid
lose_host_a "$LAST"
mirror_sanitizers
echo "replicated write-back with $CUTS link cuts under load: ok ($((SECONDS - start)) s)"
