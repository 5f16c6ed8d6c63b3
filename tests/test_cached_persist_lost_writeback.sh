#!/usr/bin/env bash
# A persist file whose disk failed a write-back while cached ran (found by
# review). Linux reports a failed write-back to one fsync, the failing
# process's, and marks the pages clean: they still read right from the
# page cache but are not on the device. cached was killed; restarted on
# the file it recovered everything, its startup sync found nothing to
# write and succeeded, and a FLUSH through it answered OK, promising
# durable 2M of writes that were not. The page cache lost (a remount, as
# memory pressure or a host crash would), the restart served the blocker's
# older data for all of them. Now a restart after a crash writes again
# what it recovers before its first sync.
# The fault: the file on ext2 on a loop device whose image lives on a
# small tmpfs; after round 1 is FLUSHed (on the device) the image's blocks
# under every still-zero page of the file are punched out and the tmpfs
# filled, so only new writes of the file fail (ENOSPC from the block layer).
# Needs root, losetup, mkfs.ext2, filefrag; skipped where they fail.
set -u
SEG_PREFIX=cached-lost-wb
. "$(dirname "$0")/lib.sh"

skip() { echo "SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (a loop device)"
for t in losetup mkfs.ext2 filefrag fallocate; do
	command -v $t > /dev/null || skip "no $t"
done
mkdir -p "$DIR/t" "$DIR/m" "$DIR/data"
mount -t tmpfs -o size=160M tmpfs "$DIR/t" 2> "$DIR/mount.err" || skip "cannot mount a tmpfs: $(cat "$DIR/mount.err")"
LOOP=
undo() {
	stop_peers
	umount "$DIR/m" 2>/dev/null
	[ -n "$LOOP" ] && losetup -d "$LOOP"
	for _ in $(seq 10); do umount "$DIR/t" 2>/dev/null && break; sleep 0.3; done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap undo EXIT
fallocate -l 128M "$DIR/t/img" && mkfs.ext2 -q -F -b 4096 "$DIR/t/img" || fail "the image"
LOOP=$(losetup -f --show "$DIR/t/img" 2> "$DIR/loop.err") || { LOOP=; skip "no loop device: $(cat "$DIR/loop.err")"; }
mount "$LOOP" "$DIR/m" || fail "mount $LOOP"

bench() {   # bench OP SEED OUT [extra]
	local op=$1 k=$2 out=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" --object-size 1M \
		--pattern rand --total-size 2M --block-size 4K --iodepth 8 --seed "$k" \
		--verify full --timeout 20 --json "$@" > "$out" 2> "$out.err"
}
flush() { "$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op flush --timeout 20 > /dev/null 2>&1; }
start_cached() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 8M --object-size 1M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$DIR/m/c.pf" \
		2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M > /dev/null || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
start_cached
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
bench write 1 "$DIR/w1.out" || fail "round 1: $(tail -1 "$DIR/w1.out")"
flush || fail "FLUSH after round 1"

echo "--- the fault: new writes of the persist file fail on the device"
filefrag -v "$DIR/m/c.pf" | awk '/^ *[0-9]+:/ { gsub(/\.\./, " "); gsub(/:/, " "); print $2, $3, $4 }' \
	> "$DIR/extents"
python3 - "$DIR/m/c.pf" "$DIR/extents" > "$DIR/punch" <<'EOF'
import sys
f = open(sys.argv[1], 'rb').read()
ext = [tuple(map(int, l.split())) for l in open(sys.argv[2])]
zero = bytes(4096)
for p in range(2, len(f) // 4096):
    if f[p * 4096:(p + 1) * 4096] == zero:
        for ls, le, ps in ext:
            if ls <= p <= le:
                print(ps + p - ls)
EOF
[ -s "$DIR/punch" ] || fail "no block of the persist file to punch"
while read -r pb; do fallocate --punch-hole -o $((pb * 4096)) -l 4096 "$DIR/t/img"; done < "$DIR/punch"
dd if=/dev/zero of="$DIR/t/filler" bs=4K 2> /dev/null
bench write 2 "$DIR/w2.out" || fail "round 2: $(tail -1 "$DIR/w2.out")"
dirty=$(peer_stat 3 dirty_bytes)
echo "round 2 acknowledged; dirty in cached: $dirty bytes"
[ "$dirty" -ge $((4 << 20)) ] || fail "rounds 1 and 2 are not both dirty in cached: the test would prove little"
sync -f "$DIR/m/c.pf" 2> /dev/null && fail "the file's write-back did not fail: no fault made"
flush && fail "a FLUSH succeeded with the persist file's write-back failing"
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null

echo "--- restarted on the file, space back: a FLUSH promises round 2 durable"
rm -f "$DIR/t/filler"
start_cached
flush || fail "FLUSH through the restarted cached"
grep "written again before the first sync" "$DIR/cached.log" | tail -1
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null

echo "--- the page cache lost (remount): every acknowledged, FLUSHed byte reads back"
umount "$DIR/m" || fail "umount"
mount "$LOOP" "$DIR/m" || fail "mount again"
start_cached
for k in 1 2; do
	bench read $k "$DIR/r$k.out"
	echo "round $k: failed $(json "$DIR/r$k.out" failed), corrupted $(json "$DIR/r$k.out" corrupted)"
done
[ "$(json "$DIR/r1.out" corrupted)" = 0 ] && [ "$(json "$DIR/r1.out" failed)" = 0 ] ||
	fail "round 1 (FLUSHed before the fault) did not read back"
[ "$(json "$DIR/r2.out" corrupted)" = 0 ] && [ "$(json "$DIR/r2.out" failed)" = 0 ] ||
	fail "round 2, FLUSHed through the restarted cached, is not on the persist device"
echo "a write-back the crashed cached saw fail is written again at its restart: ok"
