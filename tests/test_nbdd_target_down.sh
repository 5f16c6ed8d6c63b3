#!/usr/bin/env bash
# nbdd with its target (vlmcd) gone: every command fails at once with
# NBD_EIO (none hangs, none is answered done), with one warning a second
# saying how many more failed, not a line per command (a client that
# keeps sending while vlmcd restarts wrote 32233 WARN lines in under a
# second of outages, at nbdd's default log level). Once vlmcd is back,
# the same connection is served again, and every write acknowledged
# before the kill (dirty in a write-back cached, not on filed) reads back.
set -u
SEG_PREFIX=nbdd-target-down
. "$(dirname "$0")/lib.sh"

T="timeout 60"
ACKED="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_acked_writes.py"
SOCK=$DIR/nbd.sock
N=4000   # commands sent while vlmcd is gone

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writeback --dirty-high 100 --dirty-low 100 2> "$DIR/cached.log" & pids+=($!)
wait_bound 3
start_vlmcd() {
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:32M \
		2>> "$DIR/vlmcd.log" & vpid=$!
	pids+=($vpid)
	wait_bound 2
}
start_vlmcd
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$SOCK" 2> "$DIR/nbdd.log" &
npid=$!
pids+=($npid)
wait_bound 4
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done

# Written and acknowledged, dirty in cached only.
$T $ACKED write "$SOCK" --clients 2 --blocks 1024 --round 1 --acked "$DIR/acked" ||
	fail "the first writes"
[ "$(grep -vc in-flight "$DIR/acked")" = 2048 ] || fail "not every first write was acknowledged"
dirty=$(peer_stat 3 dirty_bytes)
[ "$dirty" -ge $((8 << 20)) ] || fail "cached holds only $dirty dirty bytes"

kill -KILL "$vpid"; wait "$vpid" 2>/dev/null
wait_unbound 2

# One connection sends N commands (WRITE and READ, 64 in flight) with
# vlmcd gone, then, vlmcd restarted, a WRITE and READ that must work.
cat > "$DIR/client.py" <<'EOF'
import os, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
from nbd_raw_client import READ, WRITE, DISC, connect, handshake, request, reply, recv_exact
n = int(sys.argv[3])
s = connect(sys.argv[2], timeout=30)
handshake(s, b"vol")
errors, out, sent, t0 = {}, 0, 0, time.time()
while sent < n or out:
    while sent < n and out < 64:
        if sent % 2:
            request(s, WRITE, sent, (sent % 4096) * 4096, 4096, b"z" * 4096)
        else:
            request(s, READ, sent, (sent % 4096) * 4096, 4096)
        sent, out = sent + 1, out + 1
    error, cookie = reply(s)
    out -= 1
    if error == 0 and cookie % 2 == 0:
        recv_exact(s, 4096)
    errors[error] = errors.get(error, 0) + 1
print("%d commands in %.2f s, answered %s" % (n, time.time() - t0,
      ", ".join("%d with error %d" % (v, k) for k, v in sorted(errors.items()))))
if errors != {5: n}:
    sys.exit("expected every command to fail with EIO (5)")
sys.stdout.flush()
# vlmcd comes back: the test's shell waits for this line.
print("restart", flush=True)
sys.stdin.readline()
request(s, WRITE, 1, (32 << 20) - 4096, 4096, b"w" * 4096)
if reply(s) != (0, 1):
    sys.exit("a WRITE after vlmcd's restart failed")
request(s, READ, 2, (32 << 20) - 4096, 4096)
if reply(s) != (0, 2) or recv_exact(s, 4096) != b"w" * 4096:
    sys.exit("a READ after vlmcd's restart failed or read other data")
request(s, DISC, 3, 0, 0)
print("served again on the same connection")
EOF
coproc CLIENT { $T python3 "$DIR/client.py" "$(cd "$(dirname "$0")" && pwd)/support" "$SOCK" $N 2>&1; }
cpid=$CLIENT_PID
pids+=($cpid)
read -r -t 60 line <&"${CLIENT[0]}" || fail "the client said nothing"
echo "$line"
read -r -t 5 go <&"${CLIENT[0]}"
[ "$go" = restart ] || fail "the client: $go"
lines=$(grep -c "cannot send to target port" "$DIR/nbdd.log")
echo "$N failed commands, $lines warning lines"
[ "$lines" -ge 1 ] && [ "$lines" -le 5 ] ||
	fail "$N commands with vlmcd gone wrote $lines warnings (one a second expected)"
grep -q "more such since the last word" "$DIR/nbdd.log" ||
	fail "the warning does not say how many more failed"
start_vlmcd
echo >&"${CLIENT[1]}"
while read -r -t 30 line <&"${CLIENT[0]}"; do echo "$line"; done
wait "$cpid" || fail "the client after vlmcd's restart (above)"

$T $ACKED verify "$SOCK" --round 1 --acked "$DIR/acked" ||
	fail "the writes acknowledged before vlmcd's kill"
kill -TERM "$npid"; wait "$npid" || fail "nbdd exited $? on SIGTERM"
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "ok"
