#!/usr/bin/env bash
# --pidfile (peers/runtime/daemon.c) over a stale pidfile whose pid is a
# zombie: a peer SIGKILLed stays one until its parent (init, for a
# --daemon) reaps it, which some inits do only now and then. It is gone
# (xseg up/down's alive() says so too): the restart must replace the file,
# not refuse it as "live" (an `xseg up` or a cache's restart on its persist
# file after a crash then failed until init came round).
set -u
SEG_PREFIX=pidfile-zombie
. "$(dirname "$0")/lib.sh"

# A zombie: a child of a process that never waits for it.
bash -c 'sleep 0.05 & echo $! > "$1"; exec sleep 60' _ "$DIR/zpid" & pids+=($!)
for _ in $(seq 100); do [ -s "$DIR/zpid" ] && break; sleep 0.02; done
zpid=$(cat "$DIR/zpid")
for _ in $(seq 200); do
	state=$(awk '{print $3}' "/proc/$zpid/stat" 2>/dev/null)
	[ "$state" = Z ] && break; sleep 0.02
done
[ "$state" = Z ] || fail "pid $zpid did not become a zombie (state '$state')"
echo "$zpid" > "$DIR/nulld.pid"

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 64 --heap 8M || fail "create"
"$BIN/nulld" --segment "$SEG" --port 1 --daemon --pidfile "$DIR/nulld.pid" \
	> "$DIR/out" 2> "$DIR/nulld.log"; rc=$?
npid=$(cat "$DIR/nulld.pid" 2>/dev/null)
[ -n "$npid" ] && [ "$npid" != "$zpid" ] && pids+=("$npid")
[ $rc = 0 ] || fail "nulld refused a pidfile naming zombie $zpid (exit $rc): $(cat "$DIR/nulld.log")"
[ "$npid" != "$zpid" ] || fail "the pidfile still names the zombie"
[ "$(port_info 1 owner)" = "$npid" ] || fail "port 1 is not served by the pidfile's pid $npid"
echo "ok"
