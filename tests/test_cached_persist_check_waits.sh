#!/usr/bin/env bash
# A restart on a persist file that holds dirty data reads the file's
# persist marker (cached-persist-ID) on the blocker before it serves. With
# the blocker failing that read (here: a directory where filed keeps the
# object) or down, requests wait: right (neither a replay nor a drop is
# safe without the word), but it was silent (no line, no figure, a read
# every 10 ms). Now: a WARN after a second naming the object and the
# error, stats persist_check_ms, persist_marker_read_failures and
# _read_error; once the blocker answers, the check ends and every
# acknowledged byte reads back (bench-xseg --verify full, the data only
# in the file when cached was killed). With the blocker down, SIGTERM
# exits 1 at once and the file keeps the data.
set -u
SEG_PREFIX=cached-check-waits
. "$(dirname "$0")/lib.sh"

start_cached() {   # start_cached FILE
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 8M --object-size 1M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --persist "$1" \
		2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}
bench() {   # bench OP OUT [extra]
	local op=$1 out=$2; shift 2
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op "$op" --seed 7 \
		--pattern rand --total-size 2M --block-size 4K --object-size 1M --iodepth 8 \
		--verify full --json "$@" > "$out" 2> "$out.err"
}
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 32M > /dev/null || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1
start_cached "$DIR/c.pf"

echo "--- 2M written back into the file only, cached SIGKILLed"
bench write "$DIR/w.out" --timeout 20 || fail "write: $(tail -1 "$DIR/w.out")"
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op flush --timeout 20 > /dev/null ||
	fail "FLUSH"
[ "$(peer_stat 3 persist_dirty_bytes)" -ge $((2 << 20)) ] ||
	fail "the data is not dirty in the persist file: the test would prove little"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
[ -z "$(ls "$DIR/data")" ] || fail "filed holds data: $(ls "$DIR/data" | head -3)"
cp "$DIR/c.pf" "$DIR/crash.pf"
name=$("$BIN/cached" --persist-inspect "$DIR/c.pf" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["persist_marker"])')
[ -n "$name" ] || fail "no marker name from --persist-inspect"

echo "--- restart, filed failing the read of $name: requests wait, and it says so"
mkdir "$DIR/data/$name"
start_cached "$DIR/c.pf"
bench read "$DIR/r.out" --timeout 30 & bpid=$!
for _ in $(seq 60); do grep -q "wait .* for object '$name'" "$DIR/cached.log" && break; sleep 0.1; done
grep "wait .* for object '$name'" "$DIR/cached.log" | grep -q "Is a directory" ||
	fail "no warning naming $name and its error 6 s into the check"
[ "$(peer_stat 3 fence)" = persist-checking ] || fail "fence $(peer_stat 3 fence)"
[ "$(peer_stat 3 persist_marker_read_error)" = "Is a directory" ] ||
	fail "persist_marker_read_error '$(peer_stat 3 persist_marker_read_error)'"
f=$(peer_stat 3 persist_marker_read_failures)
[ "$f" -ge 1 ] && [ "$f" -le 20 ] || fail "persist_marker_read_failures $f (back-off: <= 20 by now)"
[ "$(peer_stat 3 persist_check_ms)" -ge 1000 ] || fail "persist_check_ms $(peer_stat 3 persist_check_ms)"
kill -0 "$bpid" 2>/dev/null || fail "the read ended during the check: $(tail -1 "$DIR/r.out")"

echo "--- filed answers: no marker, the data replays and reads back"
rmdir "$DIR/data/$name"
wait "$bpid" || fail "read back: $(tail -1 "$DIR/r.out")"
[ "$(json "$DIR/r.out" failed)" = 0 ] && [ "$(json "$DIR/r.out" corrupted)" = 0 ] ||
	fail "read back: $(tail -1 "$DIR/r.out")"
grep -q "object '$name' on port 1 read" "$DIR/cached.log" || fail "no line saying the check went on"
[ "$(peer_stat 3 persist_check_ms)" = 0 ] || fail "persist_check_ms $(peer_stat 3 persist_check_ms) after"
kill -TERM "$cpid"; wait "$cpid" || fail "cached exit $? after writing back"

echo "--- filed down: a restart waits, SIGTERM exits 1 at once, the file keeps the data"
kill -TERM "$fpid"; wait "$fpid" 2>/dev/null
wait_unbound 1
start_cached "$DIR/crash.pf"
sleep 1.5
[ "$(peer_stat 3 fence)" = persist-checking ] || fail "fence $(peer_stat 3 fence) with filed down"
# crash.pf is a copy (cp) holding dirty data: it keeps the original's marker, and says so
grep -q "'$DIR/crash.pf'.*another inode.*'$name'; never run caches on the original and this copy" \
	"$DIR/cached.log" || fail "no line saying crash.pf is a copy keeping marker $name"
t0=$SECONDS
kill -TERM "$cpid"; wait "$cpid"; rc=$?
[ "$rc" = 1 ] || fail "cached exit $rc (1: data kept)"
[ $((SECONDS - t0)) -le 3 ] || fail "the stop took $((SECONDS - t0)) s"
held=$("$BIN/cached" --persist-inspect "$DIR/crash.pf" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["dirty_bytes"])')
[ "$held" -ge $((2 << 20)) ] || fail "the file keeps $held dirty bytes"
echo PASS
