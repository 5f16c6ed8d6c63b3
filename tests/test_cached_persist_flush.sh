#!/usr/bin/env bash
# cached --persist-sync flush (issue 22): a FLUSH is answered only once
# every write acknowledged before it is on the persist device. A second
# process (`cached --persist-inspect`, read only) looks at the file while
# cached runs: after verified write-back load the written buckets are in
# the file with valid checksums but pages of it are dirty in the page cache
# (a host crash would lose them: the check can fail); once a FLUSH is
# answered, no page of the file is dirty or under writeback, and the data
# is still only in the cache (nothing went to filed). SIGTERM then writes
# it back and leaves the file marked clean and unlocked; every byte reads
# back straight from filed. (And `xseg stats` says which volume the dirty
# data belongs to.)
set -u
SEG_PREFIX=cached-persist-flush
. "$(dirname "$0")/lib.sh"

VOL=8M
PF="$DIR/cache.pf"
inspect() {   # inspect FIELD: from a second process reading the file
	"$BIN/cached" --persist-inspect "$PF" --json > "$DIR/inspect.json" ||
		fail "cached --persist-inspect failed"
	python3 -c "import json,sys; print(json.load(open('$DIR/inspect.json')).get('$1', 'none'))"
}
bench() {   # bench OP OUT [extra...]
	local op=$1 out=$2; shift 2
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$op" \
		--pattern rand --total-size $VOL --block-size 4K --iodepth 16 --seed 7 \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}

echo "--- the mode's own arguments"
"$BIN/cached" --persist-inspect --help | grep -q "Usage: cached --persist-inspect" ||
	fail "--persist-inspect --help prints no usage"
expect_exit 2 "$BIN/cached" --persist-inspect
expect_exit 2 "$BIN/cached" --persist-inspect "$PF" --bogus
expect_exit 1 "$BIN/cached" --persist-inspect "$DIR/nosuch"
head -c 16384 /dev/urandom > "$DIR/junk"
expect_exit 1 "$BIN/cached" --persist-inspect "$DIR/junk"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:$VOL --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2
# --dirty-high 100: nothing is written back on its own.
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M --object-size 1M \
	--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$PF" \
	--persist-sync flush 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

echo "--- verified write-back load"
bench write "$DIR/w.out" || fail "the writes failed: $(tail -3 "$DIR/w.out.err")"
[ "$(json "$DIR/w.out" failed)" = 0 ] || fail "some writes failed"
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "cached holds no dirty data: the test would prove nothing"
# stats names the volume the dirty data belongs to (vlmcd's vol_<index> objects)
"$BIN/xseg" stats --segment "$SEG" --port 3 --json | python3 -c "
import json,sys
d=json.load(sys.stdin)
assert d['dirty_by_volume'] == {'vol': $d} and d['dirty_other_volumes_bytes'] == 0, d['dirty_by_volume']" ||
	fail "cached's dirty_by_volume does not say vol holds $d bytes"
"$BIN/xseg" stats --segment "$SEG" --prometheus > "$DIR/prom.txt" || fail "xseg stats --prometheus"
grep -qx "xseg_cached_volume_dirty_bytes{port=\"3\",peer=\"cached\",volume=\"vol\"} $d" "$DIR/prom.txt" ||
	fail "no xseg_cached_volume_dirty_bytes series for vol: $(grep volume "$DIR/prom.txt")"
[ "$(inspect lock_pid)" = "$cpid" ] || fail "the file is not shown locked by cached $cpid"
[ "$(inspect dirty_bytes)" = "$d" ] ||
	fail "a second process finds $(inspect dirty_bytes) dirty bytes in the file, cached holds $d"
[ "$(inspect torn_data)" = 0 ] && [ "$(inspect torn_headers)" = 0 ] ||
	fail "a second process finds torn entries in the file: $(cat "$DIR/inspect.json")"
echo "$d dirty bytes, all in the file with valid checksums"
dirty=$(inspect dirty_pages)
# another process's sync (a filed's first FLUSH syncs its whole file
# system) may have written the pages back: the same writes again, twice at most
for _ in 1 2; do
	[ "$dirty" = 0 ] || break
	bench write "$DIR/w.out" || fail "the writes failed: $(tail -3 "$DIR/w.out.err")"
	dirty=$(inspect dirty_pages)
done
if [ "$dirty" = none ]; then
	echo "no cachestat(2) on this kernel ($(uname -r)): the page cache is not checked"
else
	[ "$dirty" -gt 0 ] || fail "no page of the file is dirty before the FLUSH: the test would prove nothing"
	echo "before the FLUSH: $dirty pages of the file not yet on the device"
fi

echo "--- a FLUSH"
"$BIN/xreq" --segment "$SEG" --port 12 --target-port 3 --op flush > "$DIR/flush.out" ||
	fail "the FLUSH failed: $(cat "$DIR/flush.out")"
if [ "$dirty" != none ]; then
	[ "$(inspect dirty_pages)" = 0 ] && [ "$(inspect writeback_pages)" = 0 ] ||
		fail "the FLUSH was answered with pages of the file not on the device: $(cat "$DIR/inspect.json")"
	echo "after the FLUSH: every page of the file is on the device"
fi
[ "$(peer_stat 3 dirty_bytes)" = "$d" ] || fail "the FLUSH wrote back to filed instead of syncing the file"
[ "$(inspect dirty_bytes)" = "$d" ] || fail "the file lost dirty data in the FLUSH"
[ "$(peer_stat 3 persist_syncs)" -ge 1 ] || fail "persist_syncs did not move"

echo "--- SIGTERM: written back, the file clean and unlocked"
kill -TERM "$cpid"
wait "$cpid" || fail "cached exited $? on SIGTERM"
[ "$(inspect clean)" = True ] || fail "the file is not marked clean after SIGTERM: $(cat "$DIR/inspect.json")"
[ "$(inspect dirty_bytes)" = 0 ] || fail "the file still holds dirty data after SIGTERM"
[ "$(inspect lock_pid)" = 0 ] || fail "the file is still locked after cached exited"
"$BIN/cached" --persist-inspect "$PF" | grep -q "clean" || fail "the text report says nothing of clean"
bench read "$DIR/r.out" || fail "reading back from filed failed: $(tail -3 "$DIR/r.out.err")"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] || fail "filed returned wrong data"
echo "cached --persist-sync flush: ok"
