#!/usr/bin/env bash
# filed's FLUSH against a DELETE running beside a WRITE, made deterministic
# with strace's syscall delay injection (strace -e inject): a WRITE that
# recreates an object while a DELETE of it is between its unlink and its
# cleanup of the dirty set is answered; a FLUSH sent after that answer must
# fdatasync the new file. And a new object's directory entry: synced by a
# FLUSH that follows any write answered into the object, also when the
# write that created it failed, or had not ended when another thread's
# write into the new file was answered. And a failed sync sticks: Linux
# reports a write-back error to one fsync and drops the pages, so a FLUSH
# after a failed one must fail too (it was answered served, the data gone).
# Skipped without strace.
set -u
SEG_PREFIX=filed-sync
. "$(dirname "$0")/lib.sh"

command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M > /dev/null ||
	fail "create"

xr() { "$BIN/xreq" --segment "$SEG" --target-port 1 "$@"; }

# filed_under INJECT: filed on port 1 under strace, syscalls logged to $DIR/strace.log
# (THREADS workers, 4 by default; strace counts a syscall's calls per thread)
filed_under() {
	rm -rf "$DIR/d"
	strace -f -y -qq -o "$DIR/strace.log" -e trace=unlinkat,fdatasync,fsync,pwrite64 -e inject="$1" \
		"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/d" --threads "${THREADS:-4}" \
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

# dir_synced_by_flush WHAT: the FLUSH just sent fsynced the objects' directory
dir_synced_by_flush() {
	tail -n +"$((mark + 1))" "$DIR/strace.log" | grep -q "fsync(.*/d>" || {
		echo "== syscalls of the FLUSH:"; tail -n +"$((mark + 1))" "$DIR/strace.log"
		fail "$1, and the FLUSH after it did not fsync the directory: the new entry" \
		     "(and the answered data in it) may be gone after a crash"
	}
}

# The write that creates an object fails (EIO on its pwrite, the worker's
# first): the file is there all the same, and a second write into it is
# answered.
THREADS=1 filed_under pwrite64:error=EIO:when=1
xr --port 10 --op write --target new1 --data one --size 4096 > /dev/null &&
	fail "the first WRITE did not fail (pwrite made to fail)"
[ -f "$DIR/d/new1" ] || fail "the failed WRITE left no file: nothing to test"
xr --port 10 --op write --target new1 --data two --size 4096 > /dev/null ||
	fail "the second WRITE into the new object"
mark=$(wc -l < "$DIR/strace.log")
xr --port 10 --op flush > /dev/null || fail "FLUSH after the second WRITE"
dir_synced_by_flush "a WRITE was answered into an object whose creating WRITE failed"
stop_peers; pids=()

# The creating write sits in its pwrite (2 s late: every worker's first)
# while another worker finds the file and copies an object onto it (a COPY
# writes without pwrite) and is answered; then a FLUSH.
filed_under pwrite64:delay_exit=2000000:when=1
xr --port 10 --op write --target new2 --data one --size 4096 > "$DIR/first.out" &
first=$!
for _ in $(seq 200); do [ -e "$DIR/d/new2" ] && break; sleep 0.05; done
[ -e "$DIR/d/new2" ] || fail "the first WRITE did not create 'new2' within 10 s"
echo source > "$DIR/d/src2"
xr --port 11 --op copy --target new2 --src src2 > /dev/null ||
	fail "the COPY beside the creating WRITE"
kill -0 "$first" 2> /dev/null || fail "the creating WRITE ended first: nothing to test"
mark=$(wc -l < "$DIR/strace.log")
xr --port 12 --op flush > /dev/null || fail "FLUSH beside the creating WRITE"
dir_synced_by_flush "a COPY was answered into a new object while the WRITE that created it was still writing"
wait "$first" || fail "the creating WRITE: $(cat "$DIR/first.out")"
stop_peers; pids=()

# The FLUSH's fdatasync of 'lost' fails (the worker's first): every later
# FLUSH of it, or of everything, fails with that error; a FLUSH of another
# object does not; a DELETE of 'lost' ends it.
THREADS=1 filed_under fdatasync:error=EIO:when=1
xr --port 10 --op write --target lost --data one --size 4096 > /dev/null || fail "WRITE 'lost'"
out=$(xr --port 10 --op flush) && fail "the FLUSH whose fdatasync failed was served: $out"
echo "$out" | grep -q "error=5" || fail "the failed FLUSH did not say EIO: $out"
out=$(xr --port 10 --op flush) && fail "a FLUSH after a failed sync was served (the kernel" \
	"reported the error once; the data it could not write is gone): $out"
echo "$out" | grep -q "error=5" || fail "the second FLUSH did not say the first's EIO: $out"
out=$(xr --port 10 --op flush --target lost) && fail "a FLUSH of the lost object was served: $out"
xr --port 10 --op write --target other --data two --size 4096 > /dev/null || fail "WRITE 'other'"
xr --port 10 --op flush --target other > /dev/null || fail "a FLUSH of another object failed"
grep -q "sync of object 'lost' failed (Input/output error): every later FLUSH of it fails" \
	"$DIR/filed.log" || fail "the failed sync was not logged as such"
xr --port 10 --op delete --target lost > /dev/null || fail "DELETE 'lost'"
xr --port 10 --op flush > /dev/null || fail "a FLUSH after the lost object was deleted failed"
stop_peers; pids=()

echo "PASS"
