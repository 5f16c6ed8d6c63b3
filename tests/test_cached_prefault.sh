#!/usr/bin/env bash
# cached faults its cache's memory in while it serves: the first 64M
# before it answers, the rest on a thread (a 4G cache made its first
# request wait 4.8 s), from the top down. Writes that land on memory the
# thread has not reached yet (slots go out lowest first, so all of them
# past the first 64M: it faults them in under the written bytes with
# MADV_POPULATE_WRITE) must keep every byte:
# 256M of verified write-back writes into a fresh 4G cache, read back
# from the cache while it is still faulting in, then written back and
# read straight from filed. prefaulted_bytes climbs to the cache size.
set -u
SEG_PREFIX=cached-prefault
. "$(dirname "$0")/lib.sh"

stats() { "$BIN/xseg" stats --segment "$SEG" --port 3 --json > "$DIR/stats.json" || fail "stats"; }
stat_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$DIR/stats.json" "$1"; }
load() {   # op target-port
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$2" --op "$1" --pattern rand \
		--verify full --total-size 256M --block-size 4K --iodepth 16 --seed 5 --timeout 60 \
		--json > "$DIR/$1.$2.out" 2> "$DIR/$1.$2.err" ||
		fail "$1 through port $2: $(cat "$DIR/$1.$2.err")"
	grep -q '"failed":0,"corrupted":0' "$DIR/$1.$2.out" || fail "$1: $(tail -1 "$DIR/$1.$2.out")"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
cache=$((4 << 30))
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 4G --max-objects 256 \
	--write-policy writeback 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
stats
early=$(stat_field prefaulted_bytes)
echo "prefaulted when first asked: $early of $cache"
[ "$early" -ge $((64 << 20)) ] || fail "less than the first 64M faulted in before serving: $early"

load write 3
stats
during=$(stat_field prefaulted_bytes)
dirty=$(stat_field dirty_bytes)
echo "after 256M of writes: prefaulted $during, dirty $dirty"
[ "$dirty" = $((256 << 20)) ] || fail "not all 256M dirty in the cache: $dirty"
# The thread comes down to the written slots only after them: at risk.
[ "$during" -lt $((cache - (192 << 20))) ] ||
	echo "note: faulting in was past the written slots before the writes ended"
load read 3

for _ in $(seq 300); do
	stats
	[ "$(stat_field prefaulted_bytes)" = "$cache" ] && break
	sleep 0.1
done
[ "$(stat_field prefaulted_bytes)" = "$cache" ] || fail "prefaulted_bytes never reached $cache"
kill -TERM "$cpid"; wait "$cpid" || fail "cached's stop"
load read 1
echo "cached prefault: ok"
