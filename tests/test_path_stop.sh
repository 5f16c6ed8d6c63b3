#!/usr/bin/env bash
# Stopping a whole path at once loses no acknowledged write: filed, vlmcd
# and cached (write-back, plugged in front of filed, >= 100M dirty) run in
# one process group, as a terminal runs them; SIGINT (Ctrl-C) to the group
# reaches them all at once. cached writes everything back while filed keeps
# serving (a cache is still plugged in front of it), then all exit 0 within
# seconds, and filed alone reads back every byte (--verify full). The same
# with SIGTERM.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=path-stop
. tests/lib.sh

slow=1; [ -n "${SANITIZE:-}" ] && slow=4
VOL=256M TOTAL=${PATH_STOP_TOTAL:-128M}
bench() {   # bench OP SEED OUT
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern rand --total-size "$TOTAL" --block-size 64K --iodepth 16 --seed "$2" \
		--verify full --timeout 120 --json > "$3" 2> "$3.err"
}

# The path in its own process group (setsid), each peer's exit status
# written to $DIR/status.
start_path() {
	# Each peer under a subshell of its own that writes its exit status:
	# bash runs a trap only once the command it waits for has ended, so
	# the group signal does not cut the status short. (One shell waiting
	# on all three, interrupted by the signal, once wrote "vlmcd -1".)
	setsid bash -c '
		trap : INT TERM
		( trap : INT TERM; "$1/filed" --segment "$2" --port 1 --dir "$3/data" --threads 2 \
			--delay-us 200 2> "$3/filed.log"; echo "filed $?" >> "$3/status" ) &
		( trap : INT TERM; "$1/vlmcd" --segment "$2" --port 2 --blocker-port 1 \
			--volume vol:'$VOL' 2> "$3/vlmcd.log"; echo "vlmcd $?" >> "$3/status" ) &
		( trap : INT TERM; "$1/cached" --segment "$2" --port 3 --blocker-port 1 \
			--cache-size 256M --write-policy writeback --dirty-high 95 --dirty-low 90 \
			2> "$3/cached.log"; echo "cached $?" >> "$3/status" ) &
		while [ -n "$(jobs -r)" ]; do wait; done
	' path "$BIN" "$SEG" "$DIR" & group=$!
	pids+=($group)
	wait_bound 1; wait_bound 2; wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
seed=1
for sig in INT TERM; do
	echo "--- SIG$sig to the whole path"
	rm -f "$DIR/status"
	start_path
	bench write $seed "$DIR/w.out" || fail "writes through the path failed: $(cat "$DIR/w.out.err")"
	dirty=$(peer_stat 3 dirty_bytes)
	echo "cached holds $dirty dirty bytes"
	[ "$dirty" -ge $((100 << 20)) ] || fail "only $dirty bytes dirty: the stop would prove nothing"
	t0=$(date +%s.%N)
	kill -$sig -- -$group
	for _ in $(seq $((600 * slow))); do kill -0 $group 2>/dev/null || break; sleep 0.1; done
	kill -0 $group 2>/dev/null && fail "the path did not stop within $((60 * slow)) s"
	took=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
	echo "stopped in $took s: $(tr '\n' ' ' < "$DIR/status")"
	for p in filed vlmcd cached; do
		grep -qx "$p 0" "$DIR/status" || fail "$p did not exit 0: $(cat "$DIR/status")"
	done
	grep -q "dirty bytes not written" "$DIR/cached.log" && fail "cached gave up write-back"
	# filed alone (vlmcd only composes the volume): every byte is there
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & f=$!
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:$VOL \
		2> "$DIR/vlmcd2.log" & v=$!
	pids+=($f $v)
	wait_bound 1; wait_bound 2
	bench read $seed "$DIR/r.out" || fail "reads from filed failed: $(cat "$DIR/r.out.err")"
	[ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ] ||
		fail "an acknowledged write is not on filed after SIG$sig"
	echo "ok: every acknowledged byte of $TOTAL read back from filed"
	kill -TERM $f $v; wait $f $v
	seed=$((seed + 1))
done
echo "PASS"
