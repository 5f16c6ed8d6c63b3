#!/usr/bin/env bash
# A persist file whose disk fails writes (found by review), under
# bench-xseg --verify full. The file is on ext2 on a loop device whose
# image lives on a small tmpfs; the image's blocks under every still-zero
# page of the file are punched out and the tmpfs filled, so new writes of
# the file fail (ENOSPC from the block layer) and nothing synced is hurt.
# A: Linux reports a failed write-back to one fsync and marks the pages
# clean: they read right from the page cache but are not on the device.
# cached killed before it saw the failure, restarted on the file with
# space back: its startup sync found nothing to write, and a FLUSH through
# it promised round 2 durable; once the page cache went (a remount, as
# memory pressure or a host crash would) round 2 read back as the
# blocker's older data. Now a restart after a crash writes again what it
# recovers before its first sync.
# B: cached sees a sync fail: it kept taking write-back writes into pages
# the kernel may drop. Now it writes through from then on (stats: policy,
# persist_sync_error; an ERROR line) and writes every dirty byte back at
# once; a write after it is on filed, read back with cached killed.
# Needs root, losetup, mkfs.ext2, filefrag; skipped where they fail.
set -u
SEG_PREFIX=cached-lost-wb
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/loopfs_lib.sh"

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

# fault: new writes of the persist file fail on the device
fault() {
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
}

echo "--- A: the file's write-back fails, cached killed before it syncs"
fault
bench write 2 "$DIR/w2.out" || fail "round 2: $(tail -1 "$DIR/w2.out")"
dirty=$(peer_stat 3 dirty_bytes)
echo "round 2 acknowledged; dirty in cached: $dirty bytes"
[ "$dirty" -ge $((4 << 20)) ] || fail "rounds 1 and 2 are not both dirty in cached: the test would prove little"
sync -f "$DIR/m/c.pf" 2> /dev/null && fail "the file's write-back did not fail: no fault made"
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
rm -f "$DIR/t/filler"
start_cached
flush || fail "FLUSH through the restarted cached (space back)"
grep "written again before the first sync" "$DIR/cached.log" | tail -1 | sed 's/.*; //'
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
umount "$DIR/m" || fail "umount"
mount "$LOOP" "$DIR/m" || fail "mount again"
start_cached
for k in 1 2; do
	bench read $k "$DIR/r$k.out"
	echo "round $k after the page cache went: failed $(json "$DIR/r$k.out" failed)," \
	     "corrupted $(json "$DIR/r$k.out" corrupted)"
done
[ "$(json "$DIR/r1.out" corrupted)" = 0 ] && [ "$(json "$DIR/r1.out" failed)" = 0 ] ||
	fail "round 1 (FLUSHed before the fault) did not read back"
[ "$(json "$DIR/r2.out" corrupted)" = 0 ] && [ "$(json "$DIR/r2.out" failed)" = 0 ] ||
	fail "round 2, FLUSHed through the restarted cached, is not on the persist device"

echo "--- B: cached sees a sync of the file fail: it writes through"
fault
TOTAL=64K
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --object-size 1M \
	--pattern rand --total-size 64K --block-size 4K --iodepth 8 --seed 3 --verify full \
	--timeout 20 --json > "$DIR/w3.out" 2>&1 || fail "round 3: $(tail -1 "$DIR/w3.out")"
[ "$(peer_stat 3 policy)" = writeback ] || fail "cached writes through before the fault"
flush && fail "a FLUSH succeeded with the persist file's writes failing"
[ "$(peer_stat 3 policy)" = writethrough ] || fail "cached still writes back after a failed sync"
[ -n "$(peer_stat 3 persist_sync_error)" ] || fail "stats say no persist_sync_error"
for _ in $(seq 200); do [ "$(peer_stat 3 dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || fail "$(peer_stat 3 dirty_bytes) bytes still dirty 10 s after the failure"
grep -q "ERROR: persist: a sync of .* failed" "$DIR/cached.log" || fail "no ERROR said it"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback > /dev/null 2>&1 &&
	fail "write-back was turned on again over a failed persist file"
bench write 4 "$DIR/w4.out" || fail "round 4: $(tail -1 "$DIR/w4.out")"
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || fail "round 4 left dirty data in cached"
kill -KILL "$cpid"; wait "$cpid" 2> /dev/null
for _ in $(seq 100); do [ "$(port_info 3 dirty_bytes)" = 0 ] && break; sleep 0.05; done
bench read 4 "$DIR/r4.out"
echo "round 4, read from filed with cached killed: failed $(json "$DIR/r4.out" failed)," \
     "corrupted $(json "$DIR/r4.out" corrupted)"
[ "$(json "$DIR/r4.out" corrupted)" = 0 ] && [ "$(json "$DIR/r4.out" failed)" = 0 ] ||
	fail "round 4, acknowledged after the failed sync, is not on filed"
echo "a failing persist disk: written again at a restart, written through once seen: ok"
