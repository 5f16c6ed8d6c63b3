#!/usr/bin/env bash
# A half-open link: both directions between the two "hosts" (network
# namespaces joined by a veth pair) go silent at once, by a blackhole route
# on each side: no FIN, no RST, no error on either socket. A verified write
# load through a volume (bench-xseg -> vlmcd on A -> synapsed A -> synapsed
# B -> filed), a new seed each pass, is under way when the link goes.
# Requests out at the cut are answered within A's --timeout (TCP's
# user timeout closes A's connection, none hangs); while the remote is
# unreachable requests fail at once, and A's memory does not grow; once the
# routes go, A connects again, B drops the old connection (its hello
# supersedes it, or A's kernel resets it), and every block A acknowledged
# reads back with the newest seed that was acknowledged there, through A
# and straight from B's store. No bug was found here; the test keeps it so
# (test_synapsed_netns.sh sets A's end down: A's sends fail at once;
# test_cached_mirror_link_cuts.sh cuts one direction).
set -u
SEG_PREFIX=synapsed-half-open
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

netns_pair sho h
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 64M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
ip netns exec "$NSB" "$BIN/synapsed" --segment "$SEGB" --port 2 --listen "$NET.2:7000" \
	--target-port 1 --log-level info 2> "$DIR/synapsed-b.log" & pids+=($!)
wait_bound_in "$SEGB" 2
ip netns exec "$NSA" "$BIN/synapsed" --segment "$SEG" --port 2 --remote "$NET.2:7000" \
	--timeout 2 --log-level info 2> "$DIR/synapsed-a.log" & apid=$!; pids+=($apid)
wait_bound 2
"$BIN/vlmcd" --segment "$SEG" --port 3 --blocker-port 2 --volume v:4M 2> "$DIR/vlmcd-a.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:4M 2> "$DIR/vlmcd-b.log" &
pids+=($!)
wait_bound 3; wait_bound_in "$SEGB" 4
wait_log "$DIR/synapsed-a.log" "connected to $NET.2:7000"

bench() {   # SEG PORT TARGET_PORT OP SEED EXTRA...
	"$BIN/bench-xseg" --segment "$1" --port "$2" --target-port "$3" --op "$4" --seed "$5" \
		--volume v --pattern rand --total-size 4M --block-size 4K --iodepth 16 \
		--verify full --timeout 30 --json "${@:6}" > "$DIR/$4-$5.out" 2> "$DIR/$4-$5.err"
}
read_back() {   # SEG PORT TARGET_PORT SEED WHAT
	bench "$1" "$2" "$3" read "$4" --may-differ "$DIR/un-$4" || true
	tail -1 "$DIR/read-$4.out" | grep -q '"failed":0,"corrupted":0' ||
		fail "$5: $(tail -1 "$DIR/read-$4.out") $(tail -2 "$DIR/read-$4.err")"
}
rss() { awk '/VmRSS/ {print $2}' /proc/"$1"/status; }

bench "$SEG" 10 3 write 1 --unacked "$DIR/un-1" || fail "seed 1: $(tail -1 "$DIR/write-1.out")"
nconn=$(grep -c "connected to" "$DIR/synapsed-a.log")
echo "--- seed 2 written while both directions go silent for 4 s"
bench "$SEG" 10 3 write 2 --unacked "$DIR/un-2" --runtime 7 & wp=$!
sleep 0.5
r0=$(rss "$apid")
ip -n "$NSA" route add blackhole "$NET.2/32" && ip -n "$NSB" route add blackhole "$NET.1/32" ||
	fail "no blackhole routes"
sleep 4
r1=$(rss "$apid")
ip -n "$NSA" route del blackhole "$NET.2/32"; ip -n "$NSB" route del blackhole "$NET.1/32"
wait "$wp"
echo "seed 2: $(json "$DIR/write-2.out" failed) of $(json "$DIR/write-2.out" requests) failed," \
	"the slowest answered after $(json "$DIR/write-2.out" lat_us_max) us; A's RSS $r0 -> $r1 kB"
[ "$(json "$DIR/write-2.out" failed)" -gt 0 ] || fail "no request failed: the link was not cut"
python3 -c "import sys; sys.exit(float(sys.argv[1]) > 3.5e6)" "$(json "$DIR/write-2.out" lat_us_max)" ||
	fail "a request out at the cut took $(json "$DIR/write-2.out" lat_us_max) us (--timeout 2)"
[ $((r1 - r0)) -lt 8192 ] || fail "A's RSS grew from $r0 to $r1 kB while the link was silent"
grep -q "closed: Connection timed out" "$DIR/synapsed-a.log" ||
	fail "A did not close its connection as timed out"
[ "$(grep -c "connected to" "$DIR/synapsed-a.log")" -gt "$nconn" ] ||
	fail "A did not connect again once the routes went"
read_back "$SEG" 11 3 2 "seed 2 through A"
echo "seed 2 reads back through A wherever it was acknowledged"

bench "$SEG" 10 3 write 3 --unacked "$DIR/un-3" || fail "seed 3: $(tail -1 "$DIR/write-3.out")"
# B's old connection: superseded by the new one's hello, or reset by A's
# kernel when B's keepalive reached it; either way nothing of it runs later
wait_log "$DIR/synapsed-b.log" "closed: \(superseded\|Connection reset\)" 15
read_back "$SEGB" 11 4 3 "seed 3 straight from B's store"
echo "seed 3 straight from B's store, after B dropped the old connection: every block"
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, half-open link: ok"
