#!/usr/bin/env bash
# filed's FLUSH against a DELETE running beside a WRITE, made deterministic
# with strace's syscall delay injection (strace -e inject): a WRITE that
# recreates an object while a DELETE of it is between its unlink and its
# cleanup of the dirty set is answered; a FLUSH sent after that answer must
# fdatasync the new file.
# Skipped without strace.
set -u
SEG_PREFIX=filed-sync
. "$(dirname "$0")/lib.sh"

command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M > /dev/null ||
	fail "create"

xr() { "$BIN/xreq" --segment "$SEG" --target-port 1 "$@"; }

# filed_under INJECT: filed on port 1 under strace, syscalls logged to $DIR/strace.log
filed_under() {
	rm -rf "$DIR/d"
	strace -f -y -qq -o "$DIR/strace.log" -e trace=unlinkat,fdatasync,fsync -e inject="$1" \
		"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/d" --threads 4 \
		--log-level error > "$DIR/filed.log" 2>&1 &
	local spid=$!
	pids+=($spid)
	wait_bound 1
	# filed itself too: strace stopped detaches from it and leaves it running
	pids+=($(pgrep -P "$spid" -x filed))
}

# A WRITE served by the worker whose descriptor cache still holds the old
# file (its epoch moves only once the unlink returns) writes into the
# unlinked file: ordered before the DELETE, a valid order for two requests
# that overlap, but then the run shows nothing: again, 10 tries at most
# (5 all went to that worker once, under TSan).
for try in $(seq 10); do
	[ "$try" -gt 1 ] && { stop_peers; pids=(); }
	filed_under unlinkat:delay_exit=2000000
	xr --port 10 --op write --target obj --data old --size 4096 > /dev/null || fail "first WRITE"
	xr --port 10 --op flush > /dev/null || fail "first FLUSH"
	xr --port 11 --op delete --target obj > "$DIR/del.out" &
	del=$!
	# the DELETE has unlinked and sits in the injected delay (2 s): a fixed
	# 0.3 s was too short under TSan on a loaded machine
	for _ in $(seq 200); do [ -e "$DIR/d/obj" ] || break; sleep 0.05; done
	[ -e "$DIR/d/obj" ] && fail "the DELETE did not unlink 'obj' within 10 s"
	xr --port 12 --op write --target obj --data new --size 4096 > /dev/null ||
		fail "WRITE beside the DELETE"
	[ -f "$DIR/d/obj" ] && break
	wait $del
done
[ -f "$DIR/d/obj" ] || fail "in 10 tries the WRITE beside the DELETE never recreated 'obj'"
wait $del
mark=$(wc -l < "$DIR/strace.log")
xr --port 10 --op flush > /dev/null || fail "FLUSH"
[ -f "$DIR/d/obj" ] || fail "the recreated object is gone"
tail -n +"$((mark + 1))" "$DIR/strace.log" | grep -q 'fdatasync(.*/d/obj>' || {
	echo "== syscalls of the FLUSH:"; tail -n +"$((mark + 1))" "$DIR/strace.log"
	fail "a WRITE answered before the FLUSH (it recreated 'obj' beside a DELETE) was not" \
	     "synced by the FLUSH: no fdatasync of 'obj'"
}
stop_peers; pids=()

echo "PASS"
