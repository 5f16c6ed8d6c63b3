#!/usr/bin/env bash
# A persist file whose disk fails, then a host crash and a restart on the
# same file, under bench-xseg --verify full (the replay hazard; earlier
# sessions' notes), through vlmcd (rounds of other seeds over the same
# blocks). The file is on ext2 on a loop device whose image lives
# on a small tmpfs: after round 1 is FLUSHed into the file (synced, dirty
# in cached), the image is saved and every block of the file punched out
# with the tmpfs filled, so each later write of the file fails while its
# pages still read right. cached sees a sync fail and writes round 2 back
# and through; round 3 is written through (acknowledged, on filed). The
# host crash: cached SIGKILLed, the file system unmounted (its unwritable
# pages go), the saved image put back: the file holds round 1's slots,
# whose clears never reached the disk.
# Before: the restart replayed round 1 over round 3 (reads of round 3
# through cached served round 1: corrupted). Now cached wrote
# 'written-back RUN' to object cached-persist-ID on filed once every dirty
# byte was back; the restart reads it, drops what it recovered, and round
# 3 reads back through cached and from filed alone.
# Then the other word: a restart on a file whose last run wrote 'failed'
# (its write-back held at filed by strace) serves nothing (EIO) and says
# so, and a restart after it still does; --persist-discard starts afresh.
# Needs root, losetup, mkfs.ext2, filefrag; skipped where they fail.
set -u
SEG_PREFIX=cached-failed-replay
. "$(dirname "$0")/lib.sh"

LOOPFS_SIZE=96M
. "$(dirname "$0")/loopfs_lib.sh"

bench() {   # bench OP SEED OUT [extra]
	local op=$1 k=$2 out=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op "$op" --volume vol \
		--pattern rand --total-size 2M --block-size 4K --iodepth 8 --seed "$k" \
		--verify full --timeout 20 --json "$@" > "$out" 2> "$out.err"
}
flush() { "$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op flush --timeout 20 > /dev/null 2>&1; }
start_cached() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 8M --object-size 1M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$DIR/m/c.pf" "$@" \
		2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}
ok_round() {   # ok_round OUT WHAT
	[ "$(json "$1" corrupted)" = 0 ] && [ "$(json "$1" failed)" = 0 ] ||
		fail "$2: failed $(json "$1" failed), corrupted $(json "$1" corrupted)"
}
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M > /dev/null || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1
# a volume (vlmcd): every round writes the same blocks (bench-xseg names
# objects by seed, a volume's blocks by offset)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:2M --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
start_cached
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

echo "--- round 1 FLUSHed into the file, dirty in cached; then its disk fails writes"
bench write 1 "$DIR/w1.out" || fail "round 1: $(tail -1 "$DIR/w1.out")"
flush || fail "FLUSH after round 1"
[ "$(peer_stat 3 persist_dirty_bytes)" -ge $((2 << 20)) ] ||
	fail "round 1 is not dirty in the persist file: the test would prove little"
sync -f "$DIR/m/c.pf"
cp "$DIR/t/img" "$DIR/img.saved"   # the disk as the crash will leave it
loopfs_extents "$DIR/m/c.pf" > "$DIR/extents"
[ -s "$DIR/extents" ] || fail "no extent of the persist file"
while read -r pb n; do
	fallocate --punch-hole -o $((pb * 4096)) -l $((n * 4096)) "$DIR/t/img"
done < "$DIR/extents"
dd if=/dev/zero of="$DIR/t/filler" bs=4K 2> /dev/null

echo "--- round 2 written back after a failed sync; round 3 written through"
bench write 2 "$DIR/w2.out" || fail "round 2: $(tail -1 "$DIR/w2.out")"
flush && fail "a FLUSH succeeded with the persist file's writes failing"
[ -n "$(peer_stat 3 persist_sync_error)" ] || fail "stats say no persist_sync_error"
for _ in $(seq 200); do [ "$(peer_stat 3 persist_marker)" = written-back ] && break; sleep 0.05; done
[ "$(peer_stat 3 persist_marker)" = written-back ] ||
	fail "no 'written-back' on filed 10 s after the failure (dirty $(peer_stat 3 dirty_bytes), marker '$(peer_stat 3 persist_marker)')"
marker=$(ls "$DIR/data" | grep '^cached-persist-') || fail "no marker object on filed"
echo "filed holds $marker: $(head -c 64 "$DIR/data/$marker" | head -1)"
bench write 3 "$DIR/w3.out" || fail "round 3: $(tail -1 "$DIR/w3.out")"
flush || fail "a FLUSH after every byte was back and the marker said so"

echo "--- the host crash: cached killed, the page cache gone, the disk as saved"
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
umount "$DIR/m" 2> /dev/null || umount -l "$DIR/m"
losetup -d "$LOOP"; LOOP=
rm -f "$DIR/t/filler" "$DIR/t/img"
cp "$DIR/img.saved" "$DIR/t/img"
loopfs_attach
start_cached
# as the unit's ExecStartPost: a cache restarted on its port waits for a plug
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug after the restart"
grep -q "recovered [1-9][0-9]* dirty bytes" "$DIR/cached.log" ||
	fail "the restart recovered nothing: round 1's slots are not in the file, the test would prove little"
bench read 3 "$DIR/r3.out"
echo "round 3 through the restarted cached: failed $(json "$DIR/r3.out" failed)," \
     "corrupted $(json "$DIR/r3.out" corrupted)"
ok_round "$DIR/r3.out" "round 3 (acknowledged, on filed) through the restarted cached"
grep -q "WARN: persist: the last run .* says written-back.* were dropped" "$DIR/cached.log" ||
	fail "no WARN said the recovered bytes were dropped"
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || fail "dirty data left after the drop: $(peer_stat 3 dirty_bytes)"
kill -TERM "$cpid"; wait "$cpid" 2> /dev/null
for _ in $(seq 100); do [ "$(port_info 3 dirty_bytes)" = 0 ] && break; sleep 0.05; done
bench read 3 "$DIR/r3f.out"
ok_round "$DIR/r3f.out" "round 3 read from filed alone"

echo "--- a last run whose word is 'failed': nothing served"
start_cached
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug (2)"
bench write 4 "$DIR/w4.out" || fail "round 4: $(tail -1 "$DIR/w4.out")"
flush || fail "FLUSH after round 4"
[ "$(peer_stat 3 persist_dirty_bytes)" -ge $((2 << 20)) ] || fail "round 4 is not dirty in the file"
strace_delay "$fpid" pwrite64 3000000
while read -r pb n; do
	fallocate --punch-hole -o $((pb * 4096)) -l $((n * 4096)) "$DIR/t/img"
done < <(loopfs_extents "$DIR/m/c.pf")
dd if=/dev/zero of="$DIR/t/filler" bs=4K 2> /dev/null
bench write 5 "$DIR/w5.out" --total-size 64K || fail "round 5: $(tail -1 "$DIR/w5.out")"
flush && fail "a FLUSH succeeded with the persist file's writes failing (2)"
for _ in $(seq 300); do [ "$(peer_stat 3 persist_marker)" = failed ] && break; sleep 0.05; done
[ "$(peer_stat 3 persist_marker)" = failed ] || fail "no 'failed' on filed 15 s after the failure"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "everything was back already: the test would prove little"
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
kill "$STRACE" 2> /dev/null; wait "$STRACE" 2> /dev/null
rm -f "$DIR/t/filler"
for run in 1 2; do
	start_cached
	for _ in $(seq 100); do [ "$(peer_stat 3 fence)" = persist-failed ] && break; sleep 0.05; done
	[ "$(peer_stat 3 fence)" = persist-failed ] ||
		fail "start $run after a 'failed' word: fence '$(peer_stat 3 fence)', not persist-failed"
	out=$("$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op read --target vol_0000000000000000 --size 4096 --timeout 5 2>&1) &&
		fail "start $run after a 'failed' word served a read: $out"
	kill -TERM "$cpid"; wait "$cpid" 2> /dev/null
done
grep -q "ERROR: persist: the last run .* says failed" "$DIR/cached.log" || fail "no ERROR said why"
# as the ERROR says: the port's fail-closed mark given up, the file discarded
"$BIN/xseg" unplug --segment "$SEG" --force --via 3 > /dev/null 2>&1 || fail "unplug --force --via 3"
start_cached --persist-discard
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug after --persist-discard"
bench write 6 "$DIR/w6.out" || fail "round 6 after --persist-discard: $(tail -1 "$DIR/w6.out")"
echo "a failed persist file's word on the blocker: dropped when written back, refused when not: ok"
