#!/usr/bin/env bash
# Replicated write-back (issue 23) on one machine: a primary cached on
# segment A mirrors every write-back write through synapsed (loopback TCP)
# to a replica cached on segment B; both filed peers share one directory
# (tests/cached_mirror_lib.sh draws it). Verified 4K random write load at
# depth 16 on A throughout.
#   (b) the link cut: A's synapsed SIGKILLed under load: no write fails,
#       the primary degrades (write-through, nothing left dirty), back to
#       mirrored within seconds of a new synapsed; three more cuts at random
#       moments of the load; the data reads back. The load is volume b
#       through vlmcd, a new seed each pass, no new pass from a cut until
#       the store was read: what the cut's write-back lost reads back as
#       the pass before's (one seed over objects rewrote every block with
#       the same bytes some 150 times, so such a loss passed).
#   (c) the replica SIGKILLed under load and restarted on its persist file:
#       no write fails, mirrored again; the data reads back; a clean stop of
#       the primary leaves nothing dirty on the replica, and every byte is
#       in filed.
#   (d) no older data over newer: what the replica held of a volume is
#       dropped once the primary wrote it back (policy switch: cleans) or
#       went on without the replica (link cut: the reset), so the promote
#       below cannot write it over the newer version in the store.
#   (e) --mirror-fail stop: writes across a link cut fail instead, and
#       pass again once it is mirrored.
#   (f) the primary SIGKILLed and restarted on its persist file: mirrored
#       again once the recovered data is written back and the replica reset.
#   (a) host A lost: a mirrored load, every peer of A SIGKILLed and the
#       primary's persist file removed; filed lacks the data; `xseg promote`
#       on B; every byte reads back straight from B's filed.
set -u
SEG_PREFIX=cached-mirror
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

start=$SECONDS
mirror_start

echo "--- (b) the link cut under load: write-through, no failed write, mirrored again"
# volume b: through the primary (port 7) and straight from the store (8)
"$BIN/vlmcd" --segment "$SEG" --port 7 --blocker-port 3 --volume b:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b7.log" & v7=$!; pids+=($v7)
"$BIN/vlmcd" --segment "$SEG" --port 8 --blocker-port 1 --volume b:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b8.log" & v8=$!; pids+=($v8)
wait_bound 7; wait_bound 8
# bwriter: write passes on b, seeds 100, 101, ... (the last whole one in
# $DIR/b-seed) until $DIR/stop-b; none begins while $DIR/pause-b exists
# ($DIR/paused-b says it waits; 30 s at most). Files as writer's, for
# writer_alive and writer_stop.
bwriter() {
	local n=0 rc=0
	while [ $n = 0 ] || [ ! -e "$DIR/stop-b" ]; do
		for _ in $(seq 1500); do   # 30 s at most: a failed test ends it
			[ -e "$DIR/pause-b" ] && [ ! -e "$DIR/stop-b" ] || break
			touch "$DIR/paused-b"; sleep 0.02
		done
		rm -f "$DIR/paused-b"
		"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 7 --volume b --op write \
			--pattern rand --total-size "$MIRROR_TOTAL" --block-size 4K --iodepth 16 \
			--seed $((100 + n)) --verify full --timeout 30 --json > "$DIR/w-b.out" 2> "$DIR/w-b.err"
		rc=$?
		[ $rc = 0 ] || break
		echo $((100 + n)) > "$DIR/b-seed"; n=$((n + 1))
	done
	echo "$rc $n" > "$DIR/writer-b.rc"
}
# cut_checked: synapsed SIGKILLed with no new pass after it; degraded, the
# pass under way ended and written back, every byte of it read straight
# from the store.
cut_checked() {
	touch "$DIR/pause-b"
	kill -KILL "$spid"; wait "$spid" 2>/dev/null
	wait_state degraded 5
	for _ in $(seq 500); do [ -e "$DIR/paused-b" ] && break; sleep 0.02; done
	[ -e "$DIR/paused-b" ] || fail "the writer did not end its pass in 10 s: $(tail -2 "$DIR/w-b.err")"
	# write-through now: what was dirty goes to the store at once
	for _ in $(seq 200); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
	verified "$SEG" 8 read "$(cat "$DIR/b-seed")" "$DIR/b-store.out" --volume b ||
		fail "cut: seed $(cat "$DIR/b-seed") from the store: $(jfield "$DIR/b-store.out" corrupted) blocks older, $(jfield "$DIR/b-store.out" failed) failed (the degraded primary's write-back lost them)"
	rm -f "$DIR/pause-b"
}
deg=$(pstat degradations)
bwriter & wpid=$!
wait_more "$SEG" mirror_writes "$(pstat mirror_writes)" 10
wait_more "$SEG" dirty_bytes 0 10
cut_checked
echo "degraded $WAITED after A's synapsed was killed"
sleep 1
writer_alive b "$wpid" "degraded"
[ "$(pstat mirror_state)" = degraded ] || fail "mirror_state '$(pstat mirror_state)' with no synapsed on port 5"
[ "$(pstat degradations)" -gt "$deg" ] || fail "degradations did not move: $(pstat degradations)"
# write-through: what was dirty is written back at once, nothing new stays
for _ in $(seq 60); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(pstat dirty_bytes)" = 0 ] || fail "degraded, yet $(pstat dirty_bytes) bytes stay dirty"
# dirty data existed at the cut (checked above, nothing writes it back on
# its own): it was the primary's alone until written back
[ "$(pstat exposure_bytes)" -gt 0 ] || fail "exposure_bytes is 0 though dirty data was there at the cut"
echo "degraded: dirty 0, exposure_bytes $(pstat exposure_bytes), exposure_ms $(pstat exposure_ms)," \
	"mirror_failures $(pstat mirror_failures)"
wb=$(pstat blocker_write_bytes)
wait_more "$SEG" blocker_write_bytes "$wb" 5   # the writes go through
start_sender
wait_state mirrored 10
echo "mirrored again $WAITED after synapsed came back"
writer_alive b "$wpid" "mirrored again"
wait_more "$SEG" mirror_writes "$(pstat mirror_writes)" 10
wait_more "$SEG" dirty_bytes 0 10
[ "$(pstat degraded_ms_total)" -ge 1000 ] ||
	fail "degraded_ms_total $(pstat degraded_ms_total) after over a second degraded"
# more cuts at random moments of the load (MIRROR_CUTS, default 4 in all,
# 2 under a sanitizer)
for cut in $(seq 2 "${MIRROR_CUTS:-$(python3 -c "print(4 if $SCALE >= 1 else 2)")}"); do
	deg=$(pstat degradations)
	sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
	cut_checked
	writer_alive b "$wpid" "cut $cut"
	start_sender
	wait_state mirrored 10
	[ "$(pstat degradations)" -gt "$deg" ] || fail "cut $cut: degradations did not move"
	wait_more "$SEG" mirror_writes "$(pstat mirror_writes)" 10
	writer_alive b "$wpid" "after cut $cut"
done
echo "$(pstat degradations) cuts in all, mirrored again after each (lost $(pstat mirror_lost), failures $(pstat mirror_failures))"
writer_stop b "$wpid"
bseed=$(cat "$DIR/b-seed")
verified_ok "$SEG" 7 read "$bseed" "$DIR/b-read.out" --volume b
echo "phase (b): $((SECONDS - start)) s so far"

echo "--- (c) the replica SIGKILLed under load and restarted on its persist file"
deg=$(pstat degradations)
writer 3 & wpid=$!
wait_more "$SEG" mirror_writes "$(pstat mirror_writes)" 10
wait_more "$SEGB" replica_writes "$(rstat replica_writes)" 10
kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
wait_state degraded 10
echo "degraded $WAITED after the replica was killed"
sleep 0.5
writer_alive 3 "$wpid" "replica dead"
[ "$(pstat degradations)" -gt "$deg" ] || fail "degradations did not move: $(pstat degradations)"
start_replica replica2
wait_log "$DIR/replica2.log" "persist: .*recovered [1-9][0-9]* dirty bytes"
wait_state mirrored 10
echo "mirrored again $WAITED after the replica's restart (resets $(rstat replica_resets))"
[ "$(rstat replica_resets)" -ge 1 ] || fail "the restarted replica was never reset"
writer_alive 3 "$wpid" "replica back"
wait_more "$SEGB" replica_writes 0 10
writer_stop 3 "$wpid"
verified_ok "$SEG" 3 read 3 "$DIR/c-read.out"
verified_ok "$SEG" 7 read "$bseed" "$DIR/c-read2.out" --volume b

echo "--- a clean stop of the primary: written back, the replica told"
kill -TERM "$cpid"; wait "$cpid" || fail "the primary exited non-zero on SIGTERM"
for _ in $(seq 100); do [ "$(rstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(rstat dirty_bytes)" = 0 ] ||
	fail "the primary stopped cleanly, yet the replica still holds $(rstat dirty_bytes) dirty bytes (a promote would write them over newer data)"
[ "$(rstat replica_cleans)" -gt 0 ] || fail "replica_cleans is 0 after the primary wrote everything back"
verified_ok "$SEG" 8 read "$bseed" "$DIR/c-filed-b.out" --volume b
verified_ok "$SEG" 1 read 3 "$DIR/c-filed-3.out"
kill "$v7" "$v8"; wait "$v7" "$v8" 2>/dev/null
echo "b's last seed and seed 3 straight from filed; replica_cleans $(rstat replica_cleans)"
echo "phase (c): $((SECONDS - start)) s so far"

echo "--- (e) --mirror-fail stop: with the link cut writes fail (none acknowledged unreplicated); mirrored again, they pass"
start_primary --mirror-fail stop
wait_state mirrored 10
verified_ok "$SEG" 3 write 4 "$DIR/e-ok.out"
kill -KILL "$spid"; wait "$spid" 2>/dev/null
verified "$SEG" 3 write 5 "$DIR/e-cut.out"
f=$(jfield "$DIR/e-cut.out" failed) || fail "no result from the writes across the cut"
[ "$f" -gt 0 ] || fail "--mirror-fail stop: every write passed with the link cut"
wait_state degraded 5
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 3 --op write --target e-obj --size 4K --data x)
[[ "$out" == FAILED* ]] || fail "--mirror-fail stop, degraded: a write was answered '$out'"
echo "link cut: $f of 2048 writes failed, a write while degraded: $out"
start_sender
wait_state mirrored 10
verified_ok "$SEG" 3 write 5 "$DIR/e-again.out"
for s in 4 5; do verified_ok "$SEG" 3 read "$s" "$DIR/e-read-$s.out"; done
kill -TERM "$cpid"; wait "$cpid" || fail "the primary (--mirror-fail stop) exited non-zero on SIGTERM"
for s in 4 5; do verified_ok "$SEG" 1 read "$s" "$DIR/e-filed-$s.out"; done

echo "--- (f) the primary SIGKILLed and restarted on its persist file: recovered, written back, the replica reset"
start_primary
wait_state mirrored 10
verified_ok "$SEG" 3 write 6 "$DIR/f-write.out"
held=$(pstat dirty_bytes)
[ "$held" -gt 0 ] && [ "$(rstat dirty_bytes)" -ge "$held" ] ||
	fail "before the kill: primary dirty $held, replica $(rstat dirty_bytes)"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
start_primary
wait_log "$DIR/primary.log" "persist: .*recovered $held dirty bytes"
wait_state mirrored 10
echo "recovered $held bytes, mirrored again $WAITED after the restart"
# mirrored again only once what it recovered is on filed and the replica
# dropped its copies
[ "$(pstat dirty_bytes)" = 0 ] || fail "mirrored with $(pstat dirty_bytes) recovered bytes not written back"
[ "$(rstat dirty_bytes)" = 0 ] || fail "the replica still holds $(rstat dirty_bytes) bytes after the restarted primary's reset"
verified_ok "$SEG" 3 read 6 "$DIR/f-read.out"
verified_ok "$SEG" 1 read 6 "$DIR/f-filed.out"
kill -TERM "$cpid"; wait "$cpid" || fail "the restarted primary exited non-zero on SIGTERM"

echo "--- (d) no older data over newer: the replica drops what the primary wrote back (clean) or wrote without it (reset)"
# Volumes v and w through vlmcd (one name, new data per seed): on A in
# front of the primary, on B in front of B's filed (reads straight from
# the store). What the replica held of a first version must not come back
# over a second one that reached the store without it; a third version
# then covers the first half of each, the second half stays the second
# version. Checked after the promote of (a).
start_primary
wait_state mirrored 10
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:8M --volume w:8M --volume x:1M \
	--object-size 4M 2> "$DIR/vlmcd-a.log" & vapid=$!; pids+=($vapid)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:8M --volume w:8M --volume x:1M \
	--object-size 4M 2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4
# v: version 1 mirrored, written back by a switch to write-through (the
# replica told: clean), version 2 written through, write-back again
verified_ok "$SEG" 2 write 11 "$DIR/d-v1.out" --volume v
[ "$(rstat dirty_bytes)" -ge $((8 << 20)) ] || fail "the replica holds $(rstat dirty_bytes) bytes after 8M mirrored"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough || fail "policy writethrough"
for _ in $(seq 100); do [ "$(rstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(rstat dirty_bytes)" = 0 ] ||
	fail "the primary wrote everything back, yet the replica still holds $(rstat dirty_bytes) bytes (cleans lost)"
verified_ok "$SEG" 2 write 12 "$DIR/d-v2.out" --volume v
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback || fail "policy writeback"
[ "$(pstat mirror_state)" = mirrored ] || fail "mirror_state '$(pstat mirror_state)' after the policy switches"
# w: version 1 mirrored, the link cut (degraded: written back, the replica
# not told), version 2 written through, the link back (the reset)
verified_ok "$SEG" 2 write 21 "$DIR/d-w1.out" --volume w
[ "$(rstat dirty_bytes)" -ge $((8 << 20)) ] || fail "the replica holds $(rstat dirty_bytes) bytes after 8M mirrored"
# (an idle primary notices the cut with its next mirrored write: version
# 2's first writes find it and are answered once written back)
kill -KILL "$spid"; wait "$spid" 2>/dev/null
verified_ok "$SEG" 2 write 22 "$DIR/d-w2.out" --volume w
wait_state degraded 5
for _ in $(seq 100); do [ "$(pstat dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(pstat dirty_bytes)" = 0 ] || fail "degraded, yet $(pstat dirty_bytes) bytes stay dirty"
[ "$(rstat dirty_bytes)" -gt 0 ] || fail "the replica dropped version 1 of w before any reset"
start_sender
wait_state mirrored 10
[ "$(rstat dirty_bytes)" = 0 ] || fail "mirrored again, yet the replica still holds $(rstat dirty_bytes) bytes (no reset)"
verified_ok "$SEG" 2 write 13 "$DIR/d-v3.out" --volume v --total-size 4M
verified_ok "$SEG" 2 write 23 "$DIR/d-w3.out" --volume w --total-size 4M
# x: two writers at once with different data on the same 1M (writes of
# the same buckets in flight together): after the promote the store must
# hold what the primary held, block for block (--differing lists which
# blocks are not each writer's; counts alone miss blocks swapped).
xwriter() {   # SEED CLIENT_PORT: 15 passes
	for _ in $(seq 15); do
		"$BIN/bench-xseg" --segment "$SEG" --port "$2" --target-port 2 --volume x --op write \
			--pattern rand --total-size 1M --block-size 4K --iodepth 16 --seed "$1" \
			--verify full --timeout 30 --json > "$DIR/x-$1.out" 2>&1 || return 1
	done
}
xwriter 31 13 & x1=$!
xwriter 32 14 & x2=$!
wait $x1 || fail "writer 31 on x: $(tail -3 "$DIR/x-31.out")"
wait $x2 || fail "writer 32 on x: $(tail -3 "$DIR/x-32.out")"
xcounts() {   # SEGMENT PORT: "blocks-not-31 blocks-not-32"; which in $DIR/x-SEGMENT-SEED
	local s n=""
	for s in 31 32; do
		verified "$1" "$2" read $s "$DIR/x-read.out" --volume x --total-size 1M \
			--differing "$DIR/x-$1-$s"
		[ "$(jfield "$DIR/x-read.out" failed)" = 0 ] || fail "reading x on $1 port $2 failed"
		n+="$(jfield "$DIR/x-read.out" corrupted) "
	done
	echo $n
}
xp=$(xcounts "$SEG" 2)
set -- $xp
[ $(($1 + $2)) = 256 ] || fail "x through the primary: $1 blocks not of writer 31, $2 not of writer 32, of 256"
echo "x after two writers at once: $2 blocks of writer 31, $1 of writer 32 (through the primary)"

# A replica's SIGTERM writes nothing back; restarted on its file it holds
# the same (version 3 of v and w, read back after the promote below).
held=$(rstat dirty_bytes) bw=$(rstat blocker_write_bytes)
[ "$held" -gt 0 ] || fail "the replica holds nothing before its SIGTERM"
kill -TERM "$rpid"; wait "$rpid" || fail "the replica exited non-zero on SIGTERM"
[ "$bw" = 0 ] || fail "the replica wrote $bw bytes to its blocker"
start_replica replica3
wait_log "$DIR/replica3.log" "persist: .*recovered $held dirty bytes"
[ "$(rstat dirty_bytes)" = "$held" ] || fail "the restarted replica holds $(rstat dirty_bytes) bytes, not $held"
[ "$(rstat blocker_write_bytes)" = 0 ] || fail "the restarted replica wrote to its blocker"
echo "the replica's SIGTERM kept its $held bytes, restarted on its file"
after_promote() {
	local vol seed c f s
	for vol in v w; do
		seed=$([ $vol = v ] && echo 1 || echo 2)
		verified_ok "$SEGB" 4 read "${seed}3" "$DIR/d-$vol-3.out" --volume $vol --total-size 4M
		verified "$SEGB" 4 read "${seed}2" "$DIR/d-$vol-2.out" --volume $vol
		c=$(jfield "$DIR/d-$vol-2.out" corrupted) f=$(jfield "$DIR/d-$vol-2.out" failed) ||
			fail "no result reading $vol"
		[ "$f" = 0 ] && [ "$c" = 1024 ] ||
			fail "volume $vol: $c blocks differ from version 2 ($f failed), 1024 expected (the first half, version 3): older data came back"
	done
	echo "volumes v and w: version 3 in the first half, version 2 in the second, straight from B's filed"
	local xb; xb=$(xcounts "$SEGB" 4)
	[ "$xb" = "$xp" ] || fail "x: the primary held '$xp' (blocks not of 31, not of 32), the store after the promote '$xb'"
	for s in 31 32; do
		cmp -s "$DIR/x-$SEG-$s" "$DIR/x-$SEGB-$s" ||
			fail "x: the blocks not of writer $s differ between the primary and the store: $(diff "$DIR/x-$SEG-$s" "$DIR/x-$SEGB-$s" | head -5)"
	done
	echo "x straight from B's filed: block for block what the primary held"
}

echo "--- (a) host A lost under mirrored write-back, the replica promoted"
A_MORE_PIDS=$vapid
host_a_lost 1 3   # (b) wrote volume b, not seed 2
mirror_sanitizers
echo "replicated write-back: ok ($((SECONDS - start)) s)"
