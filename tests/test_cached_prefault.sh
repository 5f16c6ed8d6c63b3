#!/usr/bin/env bash
# cached faults its cache's memory in before it binds its port: a request
# sent once the port is bound is served at once, not after the whole
# cache (a 4G cache had made the first request wait 4.8 s, queued on the
# bound port). When the port is bound, cached's resident memory already
# holds the cache; the log says so, with the time it took; a cache the
# machine cannot hold is refused before binding (exit 1, naming
# --cache-size), not killed later by the OOM killer.
set -u
SEG_PREFIX=cached-prefault
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1

mem_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
cache_mb=1024
[ "$mem_kb" -gt $((4 * cache_mb * 1024)) ] || cache_mb=256
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size "${cache_mb}M" \
	--max-objects 256 --write-policy writeback --log-level info 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
rss_kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$cpid/status")
echo "cached's resident memory when its port was bound: $rss_kb kB (cache ${cache_mb}M)"
[ "$rss_kb" -ge $((cache_mb * 1024)) ] ||
	fail "the cache was not faulted in before the port was bound: $rss_kb kB resident"
grep -q "cache memory faulted in: $((cache_mb << 20)) bytes in" "$DIR/cached.log" ||
	fail "no line saying the cache memory was faulted in: $(cat "$DIR/cached.log")"

"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op write --pattern rand \
	--verify full --total-size 64M --iodepth 16 --seed 5 --json > "$DIR/w.out" 2> "$DIR/w.err" ||
	fail "writes: $(cat "$DIR/w.err")"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op read --pattern rand \
	--verify full --total-size 64M --iodepth 16 --seed 5 --json > "$DIR/r.out" 2> "$DIR/r.err" ||
	fail "reads: $(cat "$DIR/r.err")"
kill -TERM "$cpid"; wait "$cpid" || fail "cached's stop"

# More than the machine has: refused before binding, the value named.
"$BIN/cached" --segment "$SEG" --port 4 --blocker-port 1 --cache-size 64T --max-objects 16 \
	2> "$DIR/big.log"
rc=$?
[ "$rc" = 1 ] || fail "a 64T cache: exit $rc, not 1: $(cat "$DIR/big.log")"
grep -q -- "--cache-size .*cannot map and fault in" "$DIR/big.log" ||
	fail "a 64T cache: no line naming --cache-size: $(cat "$DIR/big.log")"
"$BIN/xseg" info --segment "$SEG" --json | grep -Eq '"port": *4,[^}]*"owner": *[1-9]' &&
	fail "port 4 was bound by a cache that could not start"
echo "cached prefault: ok"
