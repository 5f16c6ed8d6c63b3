#!/usr/bin/env bash
# The runtime peers' start from the outside (filed and vlmcd stand for all
# of them): a segment that does not exist or is not a name, and a port the
# segment lacks, exit 2 with one stderr line naming the value, also with
# --daemon; `out=$(filed --daemon ...)` returns once the daemon serves (it
# lets go of the caller's stdout and stderr) and the daemon owns the port.
set -u
SEG_PREFIX=peers-opts
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 256 --heap 16M || fail "create"

echo "--- bad segments and ports"
for daemon in "" --daemon; do
	bad_arg "no-such-$SEG" "$BIN/filed" --segment "no-such-$SEG" --port 1 --dir "$DIR/d" $daemon
	bad_arg "a/b" "$BIN/filed" --segment a/b --port 1 --dir "$DIR/d" $daemon
	bad_arg "--port 9-9" "$BIN/filed" --segment "$SEG" --port 9 --dir "$DIR/d" $daemon
	bad_arg "no-such-$SEG" "$BIN/vlmcd" --segment "no-such-$SEG" --port 2 --blocker-port 1 \
		--volume v:1M $daemon
done

echo "--- --lanes"
bad_arg "0" "$BIN/nulld" --segment "$SEG" --port 2 --lanes 0
bad_arg "65" "$BIN/nulld" --segment "$SEG" --port 2 --lanes 65
bad_arg "2-3" "$BIN/nulld" --segment "$SEG" --port 2-3 --lanes 2
bad_arg "--port 6-9 (with its lanes)" "$BIN/nulld" --segment "$SEG" --port 6 --lanes 4
bad_arg "--blocker-port 4" "$BIN/cached" --segment "$SEG" --port 3 --lanes 2 --blocker-port 4 \
	--cache-size 1M
# Bound: the lanes are the peer's.
"$BIN/nulld" --segment "$SEG" --port 4 --lanes 3 2> "$DIR/nulld.log" & npid=$!; pids+=($npid)
wait_bound 4
for p in 5 6; do
	"$BIN/xseg" info --segment "$SEG" --json | grep -q "\"port\":$p,\"owner\":$npid," ||
		fail "lane $p is not nulld's"
done
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":4,[^}]*"lanes":3}' ||
	fail "xseg info does not say port 4 leads 3 lanes: $("$BIN/xseg" info --segment "$SEG" --json)"
expect_exit 1 "$BIN/xseg" route --segment "$SEG" --port 1 --next 5
grep -q "lane of port 4" "$DIR/err" || fail "routing via a lane: $(cat "$DIR/err")"
kill -TERM "$npid"; wait "$npid" || fail "nulld with lanes did not stop cleanly"

echo "--- --daemon lets go of its caller"
{ "$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/d" --daemon --pidfile "$DIR/filed.pid" 2>&1
  echo "exit $?"; } | { timeout 20 cat > "$DIR/dout"; echo $? > "$DIR/drc"; }
[ -s "$DIR/filed.pid" ] && pids+=($(cat "$DIR/filed.pid"))
[ "$(cat "$DIR/drc")" = 0 ] || fail "filed --daemon kept its caller's stdout or stderr open"
[ "$(tail -1 "$DIR/dout")" = "exit 0" ] || fail "filed --daemon: $(cat "$DIR/dout")"
dpid=$(cat "$DIR/filed.pid")
"$BIN/xseg" info --segment "$SEG" --json | grep -q "\"port\":1,\"owner\":$dpid,\"alive\":true" ||
	fail "port 1 is not the daemon's ($dpid): $("$BIN/xseg" info --segment "$SEG")"
kill -TERM "$dpid"
for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$dpid" 2>/dev/null && fail "the daemon did not stop on SIGTERM"
echo "PASS"
