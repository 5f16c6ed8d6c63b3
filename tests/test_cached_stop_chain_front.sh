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
set -u
SEG_PREFIX=cached-stop-chain-front
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --delay-us 200 2> "$DIR/filed.log" &
pids+=($!)
wait_bound 1
for p in 3 4; do
	"$BIN/cached" --segment "$SEG" --port "$p" --blocker-port 1 --cache-size 8M \
		--object-size 1M --write-policy writeback --stop-timeout 20 --log-level info \
		2>> "$DIR/cached$p.log" & pids+=($!)
	wait_bound "$p"
done
front=${pids[2]}
# bench PORT OP SEED PREFIX [options]: 32M of 4K blocks at port 1, verified.
bench() {
	timeout 120 "$BIN/bench-xseg" --segment "$SEG" --port "$1" --target-port 1 --op "$2" \
		--pattern rand --total-size 32M --block-size 4K --object-size 1M --iodepth 16 \
		--seed "$3" --prefix "$4" --verify full --timeout 30 --json "${@:5}"
}
bench 10 write 1 w > "$DIR/w0.out" 2>&1 || fail "old data: $(tail -2 "$DIR/w0.out")"
bench 10 write 1 r > "$DIR/r0.out" 2>&1 || fail "read set: $(tail -2 "$DIR/r0.out")"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 || fail "plug 3 via 4"

bench 10 write 2 w --runtime 10 > "$DIR/w.out" 2> "$DIR/w.err" & writer=$!
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
kill -TERM "$front"
timeout 30 tail --pid="$front" -f /dev/null || fail "cache 4 did not stop in 30 s"
wait "$front"; rc=$?
[ "$rc" = 0 ] || fail "cache 4 exited $rc"
hop=$(port_info 3 next_hop)
[ "$hop" = None ] || fail "port 3 still routes to port $hop after cache 4 stopped"
wait "$writer"; wr=$?
wait "$reader"; rr=$?
for f in w r; do
	[ "$(json "$DIR/$f.out" failed)" = 0 ] && [ "$(json "$DIR/$f.out" corrupted)" = 0 ] ||
		fail "$f: $(tail -n 2 "$DIR/$f.err") $(tail -1 "$DIR/$f.out")"
done
[ "$wr" = 0 ] && [ "$rr" = 0 ] || fail "bench exit status: writer $wr, reader $rr"
! grep -h "sent twice\|engine bug\|not ours" "$DIR"/cached*.log || fail "a cache took its own request back"
bench 12 read 2 w > "$DIR/back.out" 2>&1 || fail "read-back: $(tail -1 "$DIR/back.out")"
echo "ok: cache 4 stopped holding $d dirty bytes, $(json "$DIR/w.out" requests) writes acknowledged, none failed, every byte read back"
