#!/usr/bin/env bash
# cached --persist killed with its port marked but its file empty:
# write-through writes under way (the mark is set for every write, and
# stays until the last one ends), or all written back by a switch to
# write-through whose mark the next maintenance tick had not yet cleared
# (here: whichever is first), when SIGKILL lands. The restart on the
# same persist file refused to serve ("port 3 was left by a cache holding
# 1 dirty bytes never written to port 1; start the cache on its persist
# file" -- it was), because it took a port over only when it recovered
# data; the port then failed EIO for good unless `xseg unplug --force`.
# Found by tests/chaos_soak.sh (seed 301, cache 8M: a FLUSH with filed
# stopped, cached killed). Now a file left in use by this port of this
# segment takes the port over, even empty (the dead cache answered no
# write-back write before it was in the file), and clears the mark; any
# other file (a new one) is still refused.
set -u
SEG_PREFIX=cached-persist-kill-clean
. "$(dirname "$0")/lib.sh"

bench() {   # OP SEED PORT [extra]: 4M of objects through port 1 (plugged via 3)
	local op=$1 seed=$2 port=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port "$port" --target-port 1 --op "$op" \
		--pattern rand --total-size 4M --block-size 4K --object-size 1M --iodepth 8 \
		--seed "$seed" --verify full --timeout 30 --json "$@" > "$DIR/$op$seed.out" 2> "$DIR/$op$seed.err"
}
start_cached() {   # FILE [extra]
	local f=$1; shift
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M --object-size 1M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$DIR/$f" "$@" \
		2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 32M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & filed=$!
pids+=($filed)
wait_bound 1
start_cached cache.pf; wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

# Seed 1 acknowledged into the cache only (dirty), then written back by
# the switch to write-through.
bench write 1 10 || fail "write 1: $(tail -2 "$DIR/write1.err")"
[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "seed 1 is not dirty in the cache"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough || fail "policy"

# Write-through writes held by a stopped filed: the port is marked, the
# cache (and its file) holds nothing dirty.
kill -STOP "$filed"
bench write 2 11 --unacked "$DIR/u2" & bpid=$!
for _ in $(seq 100); do [ "$(port_info 3 dirty_bytes)" != 0 ] && break; sleep 0.05; done
mark=$(port_info 3 dirty_bytes)
[ "$mark" != 0 ] || { kill -CONT "$filed"; fail "the port is not marked with writes under way"; }
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || { kill -CONT "$filed"; fail "the cache holds dirty data"; }
echo "port 3 marked $mark, cached holds 0 dirty bytes: SIGKILL"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
kill -CONT "$filed"
wait "$bpid"
echo "write 2: $(json "$DIR/write2.out" failed) of 1024 writes not acknowledged"

# Fail closed still: no other file takes the port over.
start_cached other.pf; wait "$cpid"; rc=$?
[ $rc != 0 ] || fail "a cached on a new persist file served the marked port"

# Its own file: it serves, and clears the mark.
start_cached cache.pf
wait_bound 3
sleep 0.3
kill -0 "$cpid" 2>/dev/null ||
	fail "the restart on the dead cache's own persist file refused: $(tail -2 "$DIR/cached.log")"
for _ in $(seq 40); do [ "$(port_info 3 dirty_bytes)" = 0 ] && break; sleep 0.05; done
[ "$(port_info 3 dirty_bytes)" = 0 ] || fail "the restarted cache left the dead one's mark"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug after the restart"

bench read 1 12 || true
[ "$(json "$DIR/read1.out" failed)" = 0 ] && [ "$(json "$DIR/read1.out" corrupted)" = 0 ] ||
	fail "seed 1 (acknowledged write-back) does not read back: $(tail -2 "$DIR/read1.out")"
bench read 2 12 --may-differ "$DIR/u2" || true
[ "$(json "$DIR/read2.out" failed)" = 0 ] && [ "$(json "$DIR/read2.out" corrupted)" = 0 ] ||
	fail "an acknowledged write of seed 2 does not read back: $(tail -2 "$DIR/read2.out")"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug"
echo "ok"
