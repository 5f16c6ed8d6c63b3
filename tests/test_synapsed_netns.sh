#!/usr/bin/env bash
# synapsed between two "hosts": network namespaces joined by a veth pair
# made here, each synapsed in its own namespace (the segments stay shared
# memory of this machine). Verified data across, then the link is cut mid-run:
# requests fail within --timeout (no hang), and once the link is back the
# traffic resumes. Skipped, with a message, where namespaces cannot be made.
set -u
SEG_PREFIX=synapsed-netns
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

netns_pair syn s

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 64M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
ip netns exec "$NSB" "$BIN/synapsed" --segment "$SEGB" --port 2 --listen "$NET.2:7000" \
	--target-port 1 --allow "$NET.1" --log-level info 2> "$DIR/synapsed-b.log" & pids+=($!)
wait_bound_in "$SEGB" 2
ip netns exec "$NSA" "$BIN/synapsed" --segment "$SEG" --port 2 --remote "$NET.2:7000" \
	--timeout 3 --log-level info 2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound_in "$SEG" 2
wait_log "$DIR/synapsed-a.log" "connected to $NET.2:7000"
wait_log "$DIR/synapsed-b.log" "connection from $NET.1:"

echo "--- verified data across the veth pair"
T=$(scaled 16384)K
bench_ok "$SEG" 10 2 --op write --pattern seq --total-size "$T" --block-size 64K --iodepth 16 --seed 1
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size "$T" --block-size 4K --iodepth 16 --seed 1
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size "$T" --block-size 16K --iodepth 8 --seed 2
bench_ok "$SEG" 10 2 --op read --pattern seq --total-size "$T" --block-size 64K --iodepth 1 --seed 2

echo "--- link cut mid-run: failures within the timeout, no hang"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op write --pattern seq \
	--total-size 4G --block-size 64K --iodepth 16 --seed 3 --timeout 30 --json \
	> "$DIR/cut.out" 2> "$DIR/cut.err" & bg=$!
sleep 0.5
ip -n "$NSA" link set "$VA" down
start=$SECONDS
wait $bg && fail "bench-xseg did not report the cut link"
[ $((SECONDS - start)) -lt 25 ] || fail "bench-xseg took $((SECONDS - start)) s to see the cut"
grep -Eq "timed out|Network is unreachable|Connection" "$DIR/cut.out" "$DIR/cut.err" ||
	fail "no failure reason reported: $(tail -2 "$DIR/cut.err")"

echo "    $(grep -c failed "$DIR/cut.err") failures reported, e.g. $(grep -m1 failed "$DIR/cut.err")"
grep -E "closed|timed out" "$DIR/synapsed-a.log" | head -3
echo "--- link back: traffic resumes"
ip -n "$NSA" link set "$VA" up
ok=0
for _ in $(seq 150); do
	"$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op ping --timeout 5 \
		> /dev/null 2>&1 && { ok=1; break; }
	sleep 0.1
done
[ $ok = 1 ] || fail "no traffic after the link came back"
# B may never see A's old connection close (the cut took A's FIN): then
# A's hello on the new one supersedes it, so nothing A wrote and failed
# there runs. Unless B learned it first: A's kernel resets what B sends
# to the gone socket, or B's keepalive closes it after 11 s.
sup=$("$BIN/xseg" stats --segment "$SEGB" --port 2 --json |
	python3 -c "import json,sys; print(json.load(sys.stdin)['superseded'])")
echo "    B: superseded $sup"
[ "$sup" -ge 1 ] || grep -Eq "closed: (Connection reset by peer|Connection timed out)" \
	"$DIR/synapsed-b.log" ||
	fail "B kept A's old connection open beside the new one (superseded $sup)"
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size "$T" --block-size 64K --iodepth 16 --seed 1
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed across namespaces: ok"
