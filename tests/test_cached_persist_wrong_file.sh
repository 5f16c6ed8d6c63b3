#!/usr/bin/env bash
# Fail closed and --persist: a cache that died holding dirty data leaves
# its port marked; a cached started there may serve only with that
# cache's data, recovered from its persist file. Any file that recovered
# something was taken: started on another cache's file (two caches in
# front of one filed, both killed dirty), cached served port 3 with the
# other cache's data while port 3's own dirty round, still only in its
# file, read back as filed's older bytes. Now the file's stamp (the
# segment and port that last used it) must not be another port of this
# segment: refused (exit 1)
# otherwise; started on its own file it serves, and every acknowledged
# byte of both rounds reads back (bench-xseg --verify full). (A file of
# another segment instance may be this port's: xseg up marks a new
# segment's port dirty for the file it names; not refused.)
set -u
SEG_PREFIX=cached-wrong-file
. "$(dirname "$0")/lib.sh"

start_cached() {   # PORT FILE
	"$BIN/cached" --segment "$SEG" --port "$1" --blocker-port 1 --cache-size 16M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$DIR/$2" \
		2>> "$DIR/cached-$1.log" & cpid=$!
	pids+=($cpid)
}
bench() {   # PORT OP SEED
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op "$2" --pattern rand \
		--total-size 4M --block-size 64K --iodepth 8 --seed "$3" --verify full --json \
		> "$DIR/$2$3.out" 2>&1
}
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M > /dev/null || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
start_cached 3 a.pf; a=$cpid; wait_bound 3
start_cached 4 b.pf; b=$cpid; wait_bound 4
bench 3 write 1 || fail "round 1 through cache 3: $(tail -1 "$DIR/write1.out")"
bench 4 write 2 || fail "round 2 through cache 4: $(tail -1 "$DIR/write2.out")"
[ "$(peer_stat 3 dirty_bytes)" -ge $((2 << 20)) ] && [ "$(peer_stat 4 dirty_bytes)" -ge $((2 << 20)) ] ||
	fail "the rounds are not dirty in the caches: the test would prove little"
kill -KILL "$a" "$b"; wait "$a" "$b" 2> /dev/null

[ "$(port_info 3 dirty_bytes)" -gt 0 ] || fail "port 3 not left marked dirty"

echo "--- port 3 with cache 4's file: refused"
start_cached 3 b.pf
for _ in $(seq 100); do kill -0 "$cpid" 2> /dev/null || break; sleep 0.1; done
kill -0 "$cpid" 2> /dev/null && fail "cached on port 3 with cache 4's persist file serves: $(grep WARN "$DIR/cached-3.log" | tail -1)"
wait "$cpid"; rc=$?
grep "ERROR" "$DIR/cached-3.log" | tail -2
[ $rc = 1 ] || fail "cached on port 3 with cache 4's persist file exited $rc, expected 1 (it served)"
grep -q "not that cache's file" "$DIR/cached-3.log" || fail "no ERROR named the file's last user"

echo "--- each on its own file: both rounds back"
start_cached 3 a.pf; wait_bound 3
start_cached 4 b.pf; wait_bound 4
bench 3 read 1 || fail "round 1 through cache 3 on its own file: $(tail -1 "$DIR/read1.out")"
bench 4 read 2 || fail "round 2 through cache 4 on its own file: $(tail -1 "$DIR/read2.out")"
echo "a dirty port and another cache's persist file: refused; each on its own: ok"
