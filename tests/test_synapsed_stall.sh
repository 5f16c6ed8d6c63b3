#!/usr/bin/env bash
# The remote synapsed stalls (SIGSTOP: its kernel still ACKs, so the TCP
# link stays up) under load. A request that times out after it was sent
# keeps its slot (LATE) until a reply or the connection's close; without
# a close the table (twice segment A's 16 requests) filled within a few
# --timeouts and every request then failed ENOBUFS at once, each with a
# WARN line (thousands a second). Now a remote that sends nothing for
# 3 x --timeout while requests are out is taken for stalled: the link
# is closed (LATE slots settled) and connected again, requests fail
# ETIMEDOUT, the log says it once at warn, stats count it
# (remote_stalls). Once the remote goes on, traffic resumes.
set -u
SEG_PREFIX=${SEG_PREFIX:-synapsed-stall}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
# a stopped peer is let go first, or it outlives the cleanup's two seconds
trap '[ -n "${bpid:-}" ] && kill -CONT "$bpid" 2>/dev/null; cleanup;
      "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 16 --heap 32M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 256 --heap 64M || fail "create B"
"$BIN/nulld" --segment "$SEGB" --port 1 2> "$DIR/nulld.log" & pids+=($!)
wait_bound_in "$SEGB" 1
P=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$P" --target-port 1 \
	2> "$DIR/synapsed-b.log" & bpid=$!; pids+=($bpid)
wait_bound_in "$SEGB" 2
"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$P" --timeout 1 \
	--log-level info 2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound 2
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$P"
ping() { "$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op ping --timeout 10 2>&1; }
out=$(ping)
[ "${out%% *}" = SERVED ] || fail "ping before the stall: $out"

echo "--- B stopped, 5 s of writes at depth 12 (--timeout 1)"
kill -STOP "$bpid"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op write --pattern rand \
	--total-size 4M --block-size 4K --iodepth 12 --runtime 5 --timeout 30 --json \
	> "$DIR/bench.out" 2> "$DIR/bench.err"
out=$(ping)
echo "a ping now: $out"
refusals=$(grep -c "no free request slot" "$DIR/synapsed-a.log")
lines=$(wc -l < "$DIR/synapsed-a.log")
warns=$(grep "WARN" "$DIR/synapsed-a.log" | grep -c "stalled")
echo "A's log: $lines lines, $refusals on a full table, $warns stall warnings"
[ "$refusals" = 0 ] ||
	fail "the table filled with timed-out requests: $refusals 'no free request slot' lines"
[ "$lines" -lt 500 ] || fail "A logged $lines lines in 5 s"
stalls=$(peer_stat 2 remote_stalls) || fail "no remote_stalls in A's stats"
echo "stats: remote_stalls $stalls, slot_refusals $(peer_stat 2 slot_refusals)"
[ "$stalls" -ge 1 ] || fail "remote_stalls $stalls: the stall was not seen"
[ "$(peer_stat 2 slot_refusals)" = 0 ] || fail "slot_refusals $(peer_stat 2 slot_refusals)"
[ "$warns" = 1 ] || fail "$warns stall warnings, expected one for the outage"
case $out in
"FAILED error=110 "*) ;;
*) fail "a ping while B is stopped: '$out', expected ETIMEDOUT (110)" ;;
esac

echo "--- B goes on: traffic resumes"
kill -CONT "$bpid"
ok=0
for _ in $(seq 50); do
	out=$(ping) && { ok=1; break; }
	sleep 0.2
done
[ $ok = 1 ] || fail "no traffic once B went on: $out"
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size 4M --block-size 4K --iodepth 12
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, remote stalled: ok"
