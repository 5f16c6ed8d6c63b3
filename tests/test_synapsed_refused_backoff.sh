#!/usr/bin/env bash
# A remote that accepts the connection and closes it at once (here: its
# --allow does not list us; the same for its table full) is tried again
# with backoff up to 2 s, not every 100 ms: a TCP connect alone used to
# reset the backoff and the outage's log, so A reconnected ten times a
# second forever with a warning each time on both hosts. Now the close is
# logged once, requests fail at once (ECONNRESET) while the remote keeps
# refusing, and once it lets A in, A connects within the backoff.
set -u
SEG_PREFIX=${SEG_PREFIX:-synapsed-refused}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 64 --heap 16M || fail "create B"
"$BIN/nulld" --segment "$SEGB" --port 1 2> "$DIR/nulld.log" & pids+=($!)
wait_bound_in "$SEGB" 1
P=$(free_port)
start_b() {   # ALLOW
	"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$P" --target-port 1 \
		--allow "$1" 2>> "$DIR/synapsed-b.log" & bpid=$!; pids+=($bpid)
	wait_bound_in "$SEGB" 2
}
start_b 127.0.0.2
"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$P" --timeout 5 \
	2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound 2
sleep 4
refused=$(grep -c "not in --allow" "$DIR/synapsed-b.log")
closes=$(grep "WARN" "$DIR/synapsed-a.log" | grep -c "closed")
echo "4 s refused: B refused $refused connections, A warned of $closes closes"
[ "$refused" -ge 2 ] || fail "A tried only $refused times in 4 s"
# backoff 0.1, 0.2, 0.4, 0.8, 1.6 s: 6 tries; every 100 ms would be 40
[ "$refused" -le 9 ] || fail "A connected $refused times in 4 s: no backoff"
[ "$closes" = 1 ] || fail "A warned $closes times of the close, expected once"

start=$(date +%s%N)
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op ping --timeout 10 2>&1)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "a ping: $out in $ms ms"
[ "${out%% *}" = FAILED ] || fail "a ping through a remote that refuses us: $out"
[ "$ms" -lt 2500 ] || fail "the ping took $ms ms to fail (--timeout 5)"

echo "--- B lets A in: A connects within the backoff"
kill -TERM "$bpid"; wait "$bpid"
start_b 127.0.0.1
ok=0
for _ in $(seq 30); do
	out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op ping --timeout 10 2>&1) &&
		{ ok=1; break; }
	sleep 0.1
done
[ $ok = 1 ] || fail "no traffic within 3 s of B letting A in: $out"
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size 4M --block-size 4K --iodepth 8
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, a remote that refuses us: ok"
