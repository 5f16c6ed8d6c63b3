#!/usr/bin/env bash
# A cache whose every index node is held by a dirty object (--max-objects
# 2: 4 nodes) while its blocker is gone: no node frees until a write-back
# succeeds, and a request for another object waited for ever (a write, and
# a read the blocker could have served; the old cached: no answer in 10
# s). Now, after a second of failing write-backs, such requests fail with
# the write-back's error (stats node_refusals); the blocker back, the
# flusher's write-back lands and requests are served again, and on
# SIGTERM every acknowledged byte is on filed.
set -u
SEG_PREFIX=cached-index-stuck
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
start_filed() {
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2>> "$DIR/filed.log" & fpid=$!
	pids+=($fpid)
	wait_bound 1
}
start_filed
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 1M --max-objects 2 \
	--object-size 64K --write-policy writeback --threads 2 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
# an object filed has, never read through the cache
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op write --target other --data x \
	--size 4096 > /dev/null || fail "write of 'other'"
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op flush > /dev/null || fail "flush"

kill -KILL $fpid; wait $fpid 2>/dev/null
bx() {   # OUT ARGS...: 64K objects through port 1 (cached's plug)
	local out=$1; shift
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --object-size 64K \
		--pattern seq --seed 1 --block-size 64K --iodepth 1 --timeout 10 --json "$@" \
		> "$out" 2> "$out.err"
}
echo "--- the blocker gone: 4 objects written back later, then a 5th and a read of another"
bx "$DIR/w4.out" --op write --total-size 256K --verify full || fail "4 writes: $(cat "$DIR/w4.out.err")"
dirty=$(peer_stat 3 dirty_bytes)
echo "dirty in cached, its blocker gone: $dirty bytes"
[ "$dirty" -ge $((256 << 10)) ] || fail "the 4 objects are not dirty in cached ($dirty bytes)"
t0=$(date +%s%N)
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op write --target fifth --data y \
	--size 4096 --timeout 10 > "$DIR/fifth.out"; wrc=$?
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op read --target other --size 4096 \
	--timeout 10 > "$DIR/other.out"; rrc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "a 5th object's write: exit $wrc ($(cat "$DIR/fifth.out")); a read of another: exit $rrc ($(cat "$DIR/other.out")); $ms ms"
[ $wrc = 1 ] && [ $rrc = 1 ] || fail "requests for objects with no node: exits $wrc, $rrc (3: no answer in 10 s)"
refusals=$(peer_stat 3 node_refusals)
nodes="$(peer_stat 3 object_nodes) of $(peer_stat 3 object_nodes_max)"
echo "node_refusals: $refusals; index nodes held: $nodes"
[ "$nodes" = "4 of 4" ] || fail "object_nodes: $nodes, expected 4 of 4"
[ "$refusals" -ge 2 ] || fail "node_refusals $refusals"

echo "--- the blocker back: written back, served again"
start_filed
# the flusher goes on trying for room: once a write-back lands, requests
# for other objects are served again (within its backoff, at most 2 s)
ok=0
for _ in $(seq 50); do
	"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --op read --target other --size 4096 \
		--timeout 10 > "$DIR/other2.out" && { ok=1; break; }
	sleep 0.2
done
[ $ok = 1 ] || fail "read of 'other' 10 s after the blocker came back: $(cat "$DIR/other2.out")"
grep -q "data='xxxx" "$DIR/other2.out" || fail "read of 'other': $(cat "$DIR/other2.out")"
echo "read of 'other' served again; cached still holds $(peer_stat 3 dirty_bytes) dirty bytes"
kill -TERM $cpid; wait $cpid; crc=$?
[ $crc = 0 ] || fail "cached exited $crc"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --object-size 64K --pattern seq \
	--seed 1 --block-size 64K --iodepth 1 --timeout 10 --json --op read --total-size 256K \
	--verify full > "$DIR/r.out" 2> "$DIR/r.out.err" || fail "read back from filed: $(cat "$DIR/r.out.err")"
echo "read back from filed: corrupted $(json "$DIR/r.out" corrupted), failed $(json "$DIR/r.out" failed)"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ] ||
	fail "acknowledged writes are not on filed"
grep -q "no index node is free" "$DIR/cached.log" || fail "cached's log does not say why requests failed"
echo "PASS"
