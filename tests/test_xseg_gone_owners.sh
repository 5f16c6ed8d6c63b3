#!/usr/bin/env bash
# Clients and peers that go away with requests out, with real peers:
#  1. a client that gives up (--timeout) and exits with writes in flight
#     on a slow filed; a new client on the same port number never takes
#     the old one's replies: every write it is told succeeded is on filed
#     (read straight from filed with --verify full);
#  2. a client killed with requests in flight: the pool is whole again
#     within a second (filed answers, and reaps the dead port it answered);
#  3. a client that asks for more requests than the pool has: a message
#     that says so, exit 2, and the pool stays whole for the next command
#     (run before 2, while filed is slow);
#  4. vlmcd killed under load: bench-xseg's requests fail within a second,
#     not at its --timeout.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=gone-owners
. tests/lib.sh

# Sanitizer builds run slower: time limits scale.
slow=1; [ -n "${SANITIZE:-}" ] && slow=3
info() {   # info EXPR: a Python expression over `xseg info --json` (as j)
	"$BIN/xseg" info --segment "$SEG" --json |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}
# Waits up to $2 seconds for the pool to be whole: every request free
# (or in a live peer's reserve), no heap buffer beyond those reserves.
wait_pool_whole() {
	local what=$1 limit=$2
	local deadline=$(($(date +%s%N) + limit * 1000000000)) j
	while [ "$(date +%s%N)" -lt $deadline ]; do
		# bash, not python: the check itself must take milliseconds
		j=$("$BIN/xseg" info --segment "$SEG" --json)
		[[ $j =~ \"requests\":([0-9]+),\"free_requests\":([0-9]+),\"reserved_requests\":([0-9]+) ]] &&
			[ $((BASH_REMATCH[2] + BASH_REMATCH[3])) -eq "${BASH_REMATCH[1]}" ] &&
			[[ $j =~ \"heap_buffers\":0, ]] && return 0
		sleep 0.02
	done
	"$BIN/xseg" info --segment "$SEG" >&2
	fail "$what: the pool is not whole $limit s later"
}
now() { date +%s.%N; }

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
# A slow disk: each READ/WRITE sleeps 300 ms.
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 --delay-us 300000 \
	2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1

echo "--- 1. a late reply never reaches the port's next owner"
# A: 32 writes at depth 16 against 300 ms writes on 2 threads: it gives up
# after 1 s with requests still in filed's hands.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern seq \
	--total-size 128K --block-size 4K --iodepth 16 --seed 1 --prefix late --object-size 64K \
	--timeout 1 --json > "$DIR/a.out" 2> "$DIR/a.log"
rc=$?
[ $rc -eq 3 ] || fail "client A was meant to give up with requests out (exit 3), exited $rc"
# B binds port 10 at once and writes other objects while A's replies come.
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern seq \
	--total-size 64K --block-size 4K --iodepth 4 --seed 2 --prefix late --object-size 64K \
	--verify full --timeout 30 --json > "$DIR/b.out" 2> "$DIR/b.log" ||
	fail "client B failed (exit $?): $(cat "$DIR/b.log")"
grep -q "not held" "$DIR/b.log" && fail "client B was handed a request it did not hold"
[ "$(json "$DIR/b.out" requests)" = 16 ] || fail "client B: $(json "$DIR/b.out" requests) of 16 answered"
# Everything B was told is on filed, read straight from it.
"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 1 --op read --pattern seq \
	--total-size 64K --block-size 4K --iodepth 4 --seed 2 --prefix late --object-size 64K \
	--verify full --timeout 30 --json > "$DIR/b-read.out" 2> "$DIR/b-read.log" ||
	fail "B's writes do not read back from filed: $(cat "$DIR/b-read.log")"
[ "$(json "$DIR/b-read.out" corrupted)" = 0 ] || fail "B's writes read back corrupted"
wait_pool_whole "after A's late replies" 3
[ "$(info 'sum(p["dropped_replies"] for p in j["port_list"] if p["port"] == 10)')" -gt 0 ] ||
	fail "no reply counted as dropped on port 10: A's late replies went somewhere"
echo "ok: B got only its own replies; A's were dropped and the pool is whole"

echo "--- 3. more requests than the pool has"
"$BIN/xseg" create --segment "$SEG-small" --ports 16 --requests 8 --heap 1M || fail "create small"
small() { "$BIN/xseg" "$@"; }
expect_exit 2 "$BIN/bench-xseg" --segment "$SEG-small" --port 10 --target-port 1 --op write \
	--pattern seq --total-size 1M --block-size 4K --iodepth 64
grep -q "iodepth 64 needs 64 requests.*has 8" "$DIR/err" ||
	fail "no message that names iodepth 64 and the pool of 8: $(cat "$DIR/err")"
small info --segment "$SEG-small" --json | python3 -c '
import json,sys; j=json.load(sys.stdin)
assert j["free_requests"] == 8 and j["heap_buffers"] == 0, j' ||
	fail "the refused client left requests held"
"$BIN/xseg" destroy --segment "$SEG-small"
echo "ok: refused with a message, pool whole"
kill -TERM $fpid; wait $fpid 2>/dev/null

# From here a disk of 2 ms per request.
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 --delay-us 2000 \
	2> "$DIR/filed2.log" & pids+=($!)
wait_bound 1
echo "--- 2. a client killed with requests in flight"
"$BIN/bench-xseg" --segment "$SEG" --port 12 --target-port 1 --op write --pattern rand \
	--total-size 64M --block-size 4K --iodepth 16 --seed 3 --prefix killed --object-size 64K \
	--timeout 30 > /dev/null 2> "$DIR/killed.log" & bpid=$!
sleep 0.5
[ "$(info 'j["free_requests"] < j["requests"] - 8')" = True ] ||
	fail "the client had no requests out when killed: the case proves nothing"
kill -KILL $bpid; wait $bpid 2>/dev/null
killed_at=$(now)
# filed answers the 16 within 20 ms; the pool is whole a second later.
wait_pool_whole "after the killed client" $slow
echo "ok: pool whole $(python3 -c "print(round($(now) - $killed_at, 2))") s after the kill"

echo "--- 4. vlmcd killed under load fails the client's requests at once"
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:256M --object-size 1M \
	2> "$DIR/vlmcd.log" & vpid=$!
pids+=($vpid)
wait_bound 2
"$BIN/bench-xseg" --segment "$SEG" --port 13 --target-port 2 --volume vol --op write \
	--pattern rand --total-size 256M --block-size 4K --iodepth 16 --seed 4 --timeout 20 \
	--json > "$DIR/v.out" 2> "$DIR/v.log" & bpid=$!
sleep 1
kill -0 $bpid 2>/dev/null || fail "the run ended before vlmcd was killed: $(cat "$DIR/v.log")"
kill -KILL $vpid; wait $vpid 2>/dev/null
killed_at=$(now)
wait $bpid; rc=$?
took=$(python3 -c "print(round($(now) - $killed_at, 2))")
[ $rc -ne 3 ] || fail "bench-xseg waited its whole --timeout for the dead vlmcd"
[ "$(json "$DIR/v.out" failed)" -gt 0 ] || fail "no request failed after vlmcd died"
python3 -c "import sys; sys.exit(0 if $took < $slow else 1)" ||
	fail "bench-xseg took $took s to see vlmcd die (limit $slow s)"
echo "ok: the client's requests failed $took s after vlmcd died"
wait_pool_whole "after vlmcd's death" $((2 * slow))
echo "PASS"
