#!/usr/bin/env bash
# A peer SIGKILLed whose parent has not reaped it yet (a zombie: a daemon's
# parent is init, and some inits reap only now and then) is dead: it holds
# no mapping of the segment any more. libxseg must see its ports as a dead
# owner's (src/owner.c): a restart on its port takes the port over, and a
# client's request queued there is failed back, instead of "bound by live
# pid" and requests waiting until init comes round. A process whose main
# thread alone has ended (also state Z, other threads running) stays live.
set -u
SEG_PREFIX=xseg-zombie
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 64 --heap 8M || fail "create"
# nulld's parent never waits: killed, it stays a zombie while the parent sleeps
bash -c '"$1" --segment "$2" --port 1 2> "$3" & echo $! > "$4"; exec sleep 120' _ \
	"$BIN/nulld" "$SEG" "$DIR/nulld0.log" "$DIR/z.pid" & pids+=($!)
wait_bound 1
zpid=$(cat "$DIR/z.pid")
kill -KILL "$zpid"
for _ in $(seq 200); do
	state=$(awk '{print $3}' "/proc/$zpid/stat" 2>/dev/null)
	[ "$state" = Z ] && break; sleep 0.02
done
[ "$state" = Z ] || fail "nulld $zpid did not stay a zombie (state '$state')"

# its other threads end a moment after the leader shows Z
for _ in $(seq 100); do [ "$(port_info 1 alive)" = False ] && break; sleep 0.02; done
[ "$(port_info 1 alive)" = False ] ||
	fail "port 1's owner, zombie $zpid, is taken for alive"
"$BIN/nulld" --segment "$SEG" --port 1 2> "$DIR/nulld1.log" & npid=$!; pids+=($npid)
for _ in $(seq 100); do [ "$(port_info 1 owner)" = "$npid" ] && break; kill -0 $npid 2>/dev/null || break; sleep 0.05; done
[ "$(port_info 1 owner)" = "$npid" ] ||
	fail "the restart could not take port 1 from zombie $zpid: $(cat "$DIR/nulld1.log")"
echo "ok"
