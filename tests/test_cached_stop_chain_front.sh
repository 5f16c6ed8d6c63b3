#!/usr/bin/env bash
# SIGTERM to the front cache of a chain (1 <- 3 <- 4: write-back cache 4
# plugged in front of write-back cache 3, both of filed on port 1) under
# verified load. Its stop wrote everything back, then took itself out of
# the route only if the blocker port (1) routed to it; at the front of a
# chain port 3 does, so the route 3 -> 4 stayed: what had queued at 4 when
# it left the port failed back ("Host is down", 16 writes and 16 reads at
# depth 16) although cached exited 0, and the route was left pointing at
# a port nobody served (the next peer to bind it would be handed port 1's
# requests). Now it splices itself out of the hop behind it: nothing
# fails, the route goes, and every acknowledged byte reads back.
# The writes go to a vlmcd volume, one pass per seed (2, 3, ...), no new
# pass once the stop begins: each pass writes new bytes over the same
# blocks, so dirty data the stop lost reads back as the pass before's. A
# --runtime writer of one seed over objects (as this test had) rewrote
# every block with the same bytes after the stop: a stop that wrote its
# dirty data nowhere still passed.
set -u
SEG_PREFIX=cached-stop-chain-front
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --delay-us 200 2> "$DIR/filed.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume w:32M --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2
for p in 3 4; do
	"$BIN/cached" --segment "$SEG" --port "$p" --blocker-port 1 --cache-size 8M \
		--object-size 1M --write-policy writeback --stop-timeout 20 --log-level info \
		2>> "$DIR/cached$p.log" & pids+=($!)
	wait_bound "$p"
done
front=${pids[3]}
# bench PORT OP SEED PREFIX [options]: 32M of 4K blocks at port 1, verified.
bench() {
	timeout 120 "$BIN/bench-xseg" --segment "$SEG" --port "$1" --target-port 1 --op "$2" \
		--pattern rand --total-size 32M --block-size 4K --object-size 1M --iodepth 16 \
		--seed "$3" --prefix "$4" --verify full --timeout 30 --json "${@:5}"
}
# vbench OP SEED: the same on volume w through vlmcd (port 2 -> port 1)
vbench() {
	timeout 120 "$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume w \
		--op "$1" --pattern rand --total-size 32M --block-size 4K --iodepth 16 \
		--seed "$2" --verify full --timeout 30 --json
}
# writer: passes of seeds 2, 3, ... until $DIR/stop-w; the last in $DIR/last
writer() {
	local k=2
	while :; do
		vbench write $k > "$DIR/w$k.out" 2> "$DIR/w$k.err" || return 1
		echo $k > "$DIR/last"
		[ -e "$DIR/stop-w" ] && return 0
		k=$((k + 1))
	done
}
vbench write 1 > "$DIR/w0.out" 2>&1 || fail "old data: $(tail -2 "$DIR/w0.out")"
bench 10 write 1 r > "$DIR/r0.out" 2>&1 || fail "read set: $(tail -2 "$DIR/r0.out")"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 3 via 4"

writer & writer=$!
bench 11 read 1 r --runtime 10 > "$DIR/r.out" 2> "$DIR/r.err" & reader=$!
# The stop must find acknowledged data only the front cache holds.
for _ in $(seq 300); do
	d=$(peer_stat 4 dirty_bytes 2>/dev/null || echo 0)
	[ "$d" -gt 0 ] && break
	sleep 0.02
done
sleep 2
d=$(peer_stat 4 dirty_bytes)
[ "$d" -gt 0 ] || fail "cache 4 held nothing dirty before its stop: proves nothing"
touch "$DIR/stop-w"   # the pass under way at the stop is the last
kill -TERM "$front"
timeout 30 tail --pid="$front" -f /dev/null || fail "cache 4 did not stop in 30 s"
wait "$front"; rc=$?
[ "$rc" = 0 ] || fail "cache 4 exited $rc"
hop=$(port_info 3 next_hop)
[ "$hop" = None ] || fail "port 3 still routes to port $hop after cache 4 stopped"
wait "$writer"; wr=$?
wait "$reader"; rr=$?
last=$(cat "$DIR/last" 2> /dev/null) || fail "no write pass ended: $(tail -n 2 "$DIR"/w*.err)"
writes=0
for f in $(seq -f "w%g" 2 "$last") r; do
	[ "$(json "$DIR/$f.out" failed)" = 0 ] && [ "$(json "$DIR/$f.out" corrupted)" = 0 ] ||
		fail "$f: $(tail -n 2 "$DIR/$f.err") $(tail -1 "$DIR/$f.out")"
	[ "$f" = r ] || writes=$((writes + $(json "$DIR/$f.out" requests)))
done
[ "$wr" = 0 ] && [ "$rr" = 0 ] || fail "bench exit status: writer $wr, reader $rr"
! grep -h "sent twice\|engine bug\|not ours" "$DIR"/cached*.log || fail "a cache took its own request back"
vbench read "$last" > "$DIR/back.out" 2>&1 ||
	fail "read-back of seed $last (the pass the stop came in): $(json "$DIR/back.out" corrupted) blocks older: $(tail -1 "$DIR/back.out")"
echo "ok: cache 4 stopped holding $d dirty bytes, $writes writes in seeds 2..$last acknowledged, none failed, every byte of seed $last read back"
