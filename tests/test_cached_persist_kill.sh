#!/usr/bin/env bash
# cached --persist (issue 22): write-back data survives a SIGKILL of cached.
# bench-xseg -> vlmcd -> cached (write-back, --dirty-high 100: nothing is
# written back on its own) -> filed. Five rounds: verified write passes on
# the round's own volume (the same data each pass, so that the kill lands
# inside one), cached SIGKILLed at a random moment once it holds dirty
# data, cached restarted on the same persist file (it must recover and
# serve), and every round so far read back through the path: every block
# of an acknowledged write verifies (a block may differ only where no reply
# of that round acknowledged it: bench-xseg --unacked, --may-differ). Then the data is shown to be only in the cache
# (dirty_bytes > 0), `xseg unplug` writes it back, and every round reads
# back straight from filed.
set -u
SEG_PREFIX=cached-persist-kill
. "$(dirname "$0")/lib.sh"

VOL=8M
ROUNDS=5
bench() {   # bench OP ROUND OUT [extra...]
	local op=$1 k=$2 out=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume "v$k" --op "$op" \
		--pattern rand --total-size $VOL --block-size 4K --iodepth 16 --seed "$k" \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
# writer K: write passes on round K's volume until $DIR/stopK exists or a
# pass fails (cached was killed under it); the last pass's JSON stays in
# $DIR/wK.out, bench-xseg's status and the passes in $DIR/wK.rc.
writer() {
	local k=$1 n=0 rc=0
	while [ ! -e "$DIR/stop$k" ] && [ $n -lt 200 ]; do
		n=$((n + 1))
		bench write "$k" "$DIR/w$k.out" --unacked "$DIR/u$k"; rc=$?
		[ $rc = 0 ] && [ "$(json "$DIR/w$k.out" failed 2>/dev/null)" = 0 ] || break
	done
	echo "$rc $n" > "$DIR/w$k.rc"
}
# forgive K: what a read of round K may forgive. A kill in pass 1 leaves
# blocks no reply acknowledged (--unacked), which may hold anything; after
# a whole pass every block was acknowledged once, and a failed rewrite of
# the same data leaves the old version or the new one: the same bytes.
forgive() {
	[ "${passes[$1]}" = 1 ] && echo --may-differ "$DIR/u$1"
}
start_cached() {   # start_cached LOG
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
		--object-size 1M --write-policy writeback --dirty-high 100 --dirty-low 90 \
		--persist "$DIR/cache.pf" 2> "$DIR/$1" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
vols=()
for k in $(seq $ROUNDS); do vols+=(--volume "v$k:$VOL"); done
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 "${vols[@]}" --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2
start_cached cached0.log
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

declare -A failed passes
for k in $(seq $ROUNDS); do
	writer "$k" & bpid=$!
	# The kill must find dirty data, or the round proves nothing.
	for _ in $(seq 400); do
		[ "$(peer_stat 3 dirty_bytes 2>/dev/null || echo 0)" -gt 0 ] && break
		sleep 0.01
	done
	[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "round $k: cached never held dirty data"
	sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
	# ... inside a pass (bench-xseg holds port 10), not between two
	"$BIN/xseg" info --segment "$SEG" --json | grep -Eq '"port":10,"owner":[1-9]' ||
		wait_bound 10
	kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
	touch "$DIR/stop$k"
	wait "$bpid"
	read -r rc n < "$DIR/w$k.rc"
	passes[$k]=$n
	[ "$rc" -ne 3 ] || fail "round $k: bench-xseg hung after cached died"
	failed[$k]=$(json "$DIR/w$k.out" failed) || fail "round $k: no result from bench-xseg"
	echo "round $k: killed in write pass $n: $(json "$DIR/w$k.out" requests) writes answered, ${failed[$k]} failed"

	# Fail closed: the dead cache's port says it held dirty data, so
	# nothing went around it; the restart on the file takes the port over.
	"$BIN/xseg" info --segment "$SEG" --json --all | python3 -c "
import json,sys
p=[p for p in json.load(sys.stdin)['port_list'] if p['port']==3][0]
sys.exit(0 if p['dirty_bytes'] > 0 else 1)" || fail "round $k: the dead cache's port is not marked dirty"
	# Reads racing the restart wait for the recovery or fail (the port
	# fails closed until then); none may return older data.
	bench read 1 "$DIR/race$k.out" --port 11 $(forgive 1) & rpid=$!
	start_cached "cached$k.log"
	wait "$rpid"
	c=$(json "$DIR/race$k.out" corrupted) || fail "round $k: no result from the racing read"
	[ "$c" = 0 ] || fail "round $k: a read racing the recovery returned $c wrong blocks"
	echo "round $k: a read during the restart: $(json "$DIR/race$k.out" failed) failed, $c wrong"
	# The port is bound before the recovery; the requests wait for it.
	[ "$(peer_stat 3 recoveries)" = 1 ] || fail "round $k: recoveries is not 1"
	grep -q "left marked dirty .* recovered from" "$DIR/cached$k.log" ||
		fail "round $k: the restarted cached did not say it took the marked port over"
	grep -q "persist: .*recovered [1-9][0-9]* dirty bytes" "$DIR/cached$k.log" ||
		fail "round $k: the restarted cached recovered nothing: $(grep persist "$DIR/cached$k.log")"
	for j in $(seq "$k"); do
		bench read "$j" "$DIR/r$k-$j.out" $(forgive "$j") ||
			[ "$(json "$DIR/r$k-$j.out" failed 2>/dev/null)" = 0 ] ||
			fail "round $k: reading round $j back failed: $(tail -3 "$DIR/r$k-$j.out.err")"
		c=$(json "$DIR/r$k-$j.out" corrupted)
		[ "$c" = 0 ] ||
			fail "round $k: $c acknowledged blocks of round $j differ (${passes[$j]} passes, ${failed[$j]} writes failed): an acknowledged write was lost"
	done
	echo "round $k: rounds 1-$k read back through the restarted cached"
done

# The data was only in the cache file (nothing was written back on its own).
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "no dirty data in the cache after the last restart"
[ "$(peer_stat 3 persist_dirty_bytes)" = "$d" ] || fail "persist_dirty_bytes differs from dirty_bytes"
echo "$d dirty bytes in the persist file before unplug"

"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug"
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || fail "dirty data left after unplug"
[ "$(peer_stat 3 persist_dirty_bytes)" = 0 ] || fail "the persist file still holds dirty data after unplug"
for j in $(seq $ROUNDS); do
	bench read "$j" "$DIR/f$j.out" $(forgive "$j")
	[ "$(json "$DIR/f$j.out" failed)" = 0 ] || fail "reading round $j from filed failed"
	c=$(json "$DIR/f$j.out" corrupted)
	[ "$c" = 0 ] || fail "filed: $c acknowledged blocks of round $j differ"
done
echo "every acknowledged write of $ROUNDS rounds survived $ROUNDS SIGKILLs: ok"
