#!/usr/bin/env bash
# A whole path stopped at once (SIGTERM to every peer) past a dead clean
# hop: chain filed (1) <- cached 3 (write-through) <- cached 4 (write-back,
# dirty). Cache 3 is SIGKILLed: routing skips it, cache 4 stays in the path
# with acknowledged dirty data. filed looked only at its own next hop (3,
# dead) and stopped at once; cache 4 could not write back and exited 1, its
# data lost (found by review). filed now walks the chain in front of it and
# serves on while a live cache is anywhere in it. Verified: dirty data in
# cache 4 before the stop, both exit 0, every acknowledged byte read back
# from a restarted filed.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=path-stop-dead-hop
. tests/lib.sh

bench() {   # bench OP SEED
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$1" --seed "$2" \
		--pattern rand --total-size 8M --block-size 4K --iodepth 8 --object-size 1M \
		--verify full --timeout 30 --json > "$DIR/b.out" 2> "$DIR/b.err" ||
		{ cat "$DIR/b.err"; tail -1 "$DIR/b.out"; return 1; }
	tail -1 "$DIR/b.out" | grep -q '"failed":0,"corrupted":0' || { tail -1 "$DIR/b.out"; return 1; }
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --stop-timeout 30 --log-level info \
	2> "$DIR/filed.log" & fpid=$!; pids+=($fpid)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writethrough 2> "$DIR/cached3.log" & c3=$!; pids+=($c3)
"$BIN/cached" --segment "$SEG" --port 4 --blocker-port 1 --cache-size 64M \
	--write-policy writeback --dirty-high 100 --stop-timeout 30 2> "$DIR/cached4.log" &
c4=$!; pids+=($c4)
wait_bound 3; wait_bound 4
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 3"
"$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 4 in front of 3"

bench write 1 || fail "writes through the chain"
kill -KILL "$c3"; wait "$c3" 2>/dev/null
bench write 2 || fail "writes with the clean cache 3 dead"
d=$(peer_stat 4 dirty_bytes)
[ "$d" -gt 0 ] || fail "cache 4 holds nothing dirty: nothing at risk"
echo "cache 3 dead, cache 4 holds $d dirty bytes; SIGTERM to filed and cache 4 at once"
kill -TERM "$fpid" "$c4"
wait "$c4"; rc4=$?
wait "$fpid"; rcf=$?
[ "$rc4" = 0 ] || { tail -3 "$DIR/cached4.log"; fail "cache 4 exited $rc4: it could not write back"; }
[ "$rcf" = 0 ] || fail "filed exited $rcf"
grep -q "serving on while cache port 4 in front of port 1" "$DIR/filed.log" ||
	fail "filed did not wait for cache 4 past the dead cache 3"

"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
wait_bound 1
bench read 1 || fail "seed 1 from filed after the stop"
bench read 2 || fail "seed 2 from filed after the stop"
echo "a path stopped at once past a dead clean hop lost nothing: ok"
