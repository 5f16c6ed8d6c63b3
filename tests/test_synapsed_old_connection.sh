#!/usr/bin/env bash
# A requester's old connection must run nothing once a newer one said
# hello (docs/synapsed-protocol.md, connection epochs). A requester that
# timed out on a connection, closed it and connected again has failed what
# it wrote there, but those bytes may still reach the listener, or sit
# unread there (it was stopped, or not reading that connection for
# back-pressure), and run after what the requester wrote, and had
# acknowledged, on the new connection: an old write over a newer one.
#
# A fake requester plays it against synapsed B (filed behind it) exactly:
# W1 (64K of 'A') half sent on connection 1; W2 (4K of 'B', same offset)
# sent and acknowledged on connection 2; then the rest of W1 on connection 1.
# Without hellos (connections nobody names, e.g. an older synapsed) W1
# lands over W2: the risk is real. With hellos (what synapsed's --remote
# link sends), connection 2's closes connection 1 and W2 stays; a hello of
# an older epoch is refused while a newer one is open (taken, with a
# warning, once nothing of the requester is left: a restart with its
# clock stepped back); a hello after a request, or with a field set,
# closes the connection. (A real requester's hello: test_synapsed_netns.sh,
# test_cached_mirror_reconnect_late.sh: a link cut, B never sees the old
# connection close, A's new one supersedes it.)
set -u
SEG_PREFIX=synapsed-oldconn
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
trap '[ -n "${bpid:-}" ] && kill -CONT "$bpid" 2>/dev/null; cleanup;
      "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT

"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 64 --heap 32M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound_in "$SEGB" 1
P=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$P" --target-port 1 \
	--log-level info 2> "$DIR/synapsed-b.log" & bpid=$!; pids+=($bpid)
wait_bound_in "$SEGB" 2

# fake MODE OBJECT: the two connections above; MODE plain or hello.
fake() {
	python3 - "$P" "$1" "$2" <<'PY'
import socket, struct, sys, time
port, mode, obj = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
H = '<IHBBIIQQQQiIQ'
def hdr(kind, op, fid, off, size, tl, dl):
    return struct.pack(H, 0x4e595358, 1, kind, 0, op, 0, fid, off, size, 0, 0, tl, dl)
def hello(s, epoch):
    if mode == 'hello':
        s.sendall(hdr(3, 0, 0x5eed, epoch, 0, 0, 0))
def recv_exact(s, n):
    b = b''
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
c1 = socket.create_connection(('127.0.0.1', port)); hello(c1, 1000)
w1 = hdr(1, 2, 1, 0, 65536, len(obj), 65536) + obj + b'A' * 65536
c1.sendall(w1[:len(w1) // 2])
time.sleep(0.3)
c2 = socket.create_connection(('127.0.0.1', port)); hello(c2, 2000)
c2.sendall(hdr(1, 2, 2, 0, 4096, len(obj), 4096) + obj + b'B' * 4096)
c2.settimeout(10)
r = struct.unpack(H, recv_exact(c2, 64))
print('W2 result %d error %d' % (r[3], r[10]), flush=True)
try:
    c1.sendall(w1[len(w1) // 2:])
except (ConnectionResetError, BrokenPipeError):
    pass
time.sleep(0.5)
c1.close(); c2.close()
PY
}
stat_of() { "$BIN/xseg" stats --segment "$1" --port "$2" --json |
	python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$3"; }
first8() { "$BIN/xreq" --segment "$SEGB" --port 12 --target-port 1 --op read --target "$1" \
	--size 8 --timeout 10; }

echo "--- without hellos: the old connection's W1 lands over the acknowledged W2"
out=$(fake plain objp) || fail "fake requester: $out"
echo "$out"
[ "$out" = "W2 result 1 error 0" ] || fail "W2 not served: $out"
got=$(first8 objp)
echo "objp: $got"
[ "$got" = "SERVED serviced=8 data='AAAAAAAA'" ] ||
	fail "W1 did not land after W2 without hellos ($got): the scenario puts nothing at risk"

echo "--- with hellos: connection 2 supersedes connection 1, W1 never runs"
out=$(fake hello objh) || fail "fake requester: $out"
echo "$out"
[ "$out" = "W2 result 1 error 0" ] || fail "W2 not served: $out"
got=$(first8 objh)
echo "objh: $got"
[ "$got" = "SERVED serviced=8 data='BBBBBBBB'" ] ||
	fail "an old connection's write landed over a newer acknowledged one: $got"
wait_log "$DIR/synapsed-b.log" "superseded by a newer connection of its requester"
sup=$(stat_of "$SEGB" 2 superseded)
[ "$sup" = 1 ] || fail "superseded $sup, expected 1"

echo "--- hellos that break the rules close their connection"
python3 - "$P" <<'PY' || fail "hello rules"
import socket, struct, sys, time
port = int(sys.argv[1])
H = '<IHBBIIQQQQiIQ'
def hdr(kind, op, fid, off, size):
    return struct.pack(H, 0x4e595358, 1, kind, 0, op, 0, fid, off, size, 0, 0, 0, 0)
def closed(*frames):
    s = socket.create_connection(('127.0.0.1', port)); s.settimeout(5)
    for f in frames:
        s.sendall(f)
    try:
        while True:
            d = s.recv(4096)
            if not d:
                return True
            # a PING's reply: read on
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True
new = socket.create_connection(('127.0.0.1', port)); new.sendall(hdr(3, 0, 0x6000, 2000, 0))
time.sleep(0.2)
assert closed(hdr(3, 0, 0x6000, 1500, 0)), 'a hello of an older epoch was taken'
new.close()
time.sleep(0.2)
# nothing of 0x6000 left: an older epoch is a restart with the clock back
assert not closed(hdr(3, 0, 0x6000, 1000, 0), hdr(1, 0, 6, 0, 0)), 'a restarted requester was refused'
assert closed(hdr(3, 0, 0x99, 1, 4096)), 'a hello with a size was taken'
assert closed(hdr(1, 0, 5, 0, 0), hdr(3, 0, 0x98, 1, 0)), 'a hello after a request was taken'
assert not closed(hdr(3, 0, 0x97, 1, 0), hdr(1, 0, 5, 0, 0)), 'a good hello, then a PING, closed'
# one requester from two hosts (two synapsed hashing alike): warned
a = socket.create_connection(('127.0.0.1', port)); a.sendall(hdr(3, 0, 0x8000, 10, 0))
time.sleep(0.2)
b = socket.create_connection(('127.0.0.1', port), source_address=('127.0.0.2', 0))
b.sendall(hdr(3, 0, 0x8000, 20, 0))
a.settimeout(5)
assert a.recv(64) == b'', 'the older connection of 0x8000 was not closed'
b.close()
PY
wait_log "$DIR/synapsed-b.log" "an older connection of its requester"
wait_log "$DIR/synapsed-b.log" "a hello after its first frame"
wait_log "$DIR/synapsed-b.log" "taken (its clock went back?)"
wait_log "$DIR/synapsed-b.log" "connects from 127.0.0.1:[0-9]* and from 127.0.0.2"
wait_log "$DIR/synapsed-b.log" "bad frame: field out of range"

echo "--- what the old connection left at the target: a request over it waits, another does not"
"$BIN/filed" --segment "$SEGB" --port 3 --dir "$DIR/slow" --delay-us 1000000 --threads 4 \
	2> "$DIR/filed-slow.log" & pids+=($!)
wait_bound_in "$SEGB" 3
P2=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 4 --listen "127.0.0.1:$P2" --target-port 3 \
	--log-level info 2> "$DIR/synapsed-b2.log" & pids+=($!)
wait_bound_in "$SEGB" 4
out=$(python3 - "$P2" <<'PY'
import socket, struct, sys, time
port = int(sys.argv[1])
H = '<IHBBIIQQQQiIQ'
def frame(kind, fid, off, obj, data=b'', epoch=0):
    if kind == 3:
        return struct.pack(H, 0x4e595358, 1, 3, 0, 0, 0, 0x7000, epoch, 0, 0, 0, 0, 0)
    return struct.pack(H, 0x4e595358, 1, 1, 0, 2, 0, fid, off, len(data), 0, 0,
                       len(obj), len(data)) + obj + data
def recv_exact(s, n):
    b = b''
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
c1 = socket.create_connection(('127.0.0.1', port))
c1.sendall(frame(3, 0, 0, b'', epoch=10) + frame(1, 1, 0, b'objA', b'A' * 4096))
time.sleep(0.3)   # W1 is at filed, 1 s to go
c2 = socket.create_connection(('127.0.0.1', port)); c2.settimeout(20)
t0 = time.time()
c2.sendall(frame(3, 0, 0, b'', epoch=20) + frame(1, 3, 0, b'objB', b'C' * 4096) +
           frame(1, 2, 0, b'objA', b'B' * 4096))   # (behind W2, W3 would wait too: arrival order)
done = {}
for _ in range(2):
    r = struct.unpack(H, recv_exact(c2, 64))
    done[r[6]] = (time.time() - t0, r[3])
print('W2 %.2f s result %d, W3 %.2f s result %d' % (done[2][0], done[2][1], done[3][0], done[3][1]))
print('wait %.2f' % (done[2][0] - done[3][0]))
PY
) || fail "fake requester: $out"
echo "$out"
case $out in *"result 1, W3"*"result 1"*) ;; *) fail "W2 or W3 not served: $out" ;; esac
wait_s=$(echo "$out" | sed -n 's/^wait //p')
python3 -c "import sys; sys.exit(0 if float('$wait_s') >= 0.4 else 1)" ||
	fail "W2 (over W1, still at the target from the old connection) did not wait for it: only $wait_s s after W3"
got=$("$BIN/xreq" --segment "$SEGB" --port 12 --target-port 3 --op read --target objA --size 8 --timeout 10)
[ "$got" = "SERVED serviced=8 data='BBBBBBBB'" ] || fail "objA: $got"

echo "--- a real requester says hello"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 16 --heap 32M || fail "create A"
"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$P" --log-level info \
	2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound 2
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$P"
bench_ok "$SEG" 10 2 --op write --pattern seq --total-size 256K --block-size 4K --iodepth 4
wait_log "$DIR/synapsed-b.log" "requester 0x[0-9a-f]*, epoch [0-9]\{19\}"

grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, old connections: ok"
