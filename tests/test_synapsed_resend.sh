#!/usr/bin/env bash
# Requests not yet written when the --remote link breaks wait for the next
# connection (docs/synapsed-protocol.md); only those (partly) written fail
# ECONNRESET. A fake remote takes the connection and reads nothing, so
# synapsed A's socket fills and its writer stops with frames taken from the
# queues into its write batch, not one byte of them written. The remote
# reads 2 MiB, so that A's writer takes a batch and stops again; it then
# measures what A wrote (what it read, its receive queue, A's send queue:
# `ss`), resets the connection and then answers every request on the next
# one. Frames of 512K: at most ceil(bytes in the kernels / frame) requests
# may fail; synapsed A failed the whole batch (its frames were marked SENT
# when taken, before any write), so one or two more.
set -u
SEG_PREFIX=synapsed-resend
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

command -v ss > /dev/null || { echo "SKIP: no ss (iproute2)"; exit 0; }
N=20
SIZE=524288
"$BIN/xseg" create --segment "$SEG" --ports 64 --requests 64 --heap 64M || fail "create A"
FP=$(free_port)
python3 - "$FP" "$DIR" > "$DIR/fake.log" 2>&1 <<'PY' & fakepid=$!
import socket, struct, subprocess, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)   # inherited: a small window
srv.bind(("127.0.0.1", port)); srv.listen(4); srv.settimeout(30)
c1, _ = srv.accept()
print('first connection', flush=True)
def queued():   # bytes of the stream in the kernels: Recv-Q + Send-Q of both ends
    out = subprocess.run(['ss', '-tnH', 'state', 'established', '( sport = :%d or dport = :%d )'
                          % (port, port)], capture_output=True, text=True).stdout
    return sum(int(l.split()[0]) + int(l.split()[1]) for l in out.splitlines() if l.strip())
# wait for the requests, then for the queues to stop growing
while True:
    try:
        open(d + '/go').close(); break
    except FileNotFoundError:
        time.sleep(0.05)
time.sleep(0.5)
# read 2 MiB: A's socket takes more, its writer takes its next batch from
# the queues and stops again when the socket is full
got = 0
while got < (2 << 20):
    got += len(c1.recv(min(65536, (2 << 20) - got)))
last, same = -1, 0
while same < 10:
    time.sleep(0.1)
    k = queued()
    same = same + 1 if k == last else 0
    last = k
last += got
open(d + '/kernel_bytes', 'w').write('%d\n' % last)
print('written by A', last, flush=True)
c1.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
c1.close()   # RST: whatever was in the kernels is gone
def recv_exact(c, n):
    b = b''
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
c, _ = srv.accept()
c.settimeout(5)
n = 0
try:
    while True:
        f = struct.unpack('<IHBBIIQQQQiIQ', recv_exact(c, 64))
        magic, ver, kind, res, op, flags, fid, off, size, serv, err, tl, dl = f
        recv_exact(c, tl + dl)
        if kind == 3:   # the hello: nothing to answer
            continue
        c.sendall(struct.pack('<IHBBIIQQQQiIQ', magic, 1, 2, 1, op, 0, fid, off, size,
                              size, 0, 0, 0))
        n += 1
        print('answered', n, flush=True)
except (EOFError, socket.timeout, ConnectionResetError, BrokenPipeError):
    pass
PY
pids+=($fakepid)
"$BIN/synapsed" --segment "$SEG" --port 9 --remote "127.0.0.1:$FP" --timeout 30 \
	--log-level info 2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound 9
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$FP"

xpids=()
for i in $(seq 10 $((10 + N - 1))); do
	"$BIN/xreq" --segment "$SEG" --port "$i" --target-port 9 --op write --target "obj-$i" \
		--size $SIZE --data x --timeout 30 > "$DIR/xreq-$i.out" 2>&1 & xpids+=($!)
done
sleep 1
touch "$DIR/go"
wait "${xpids[@]}"
cat "$DIR/fake.log"
[ -s "$DIR/kernel_bytes" ] || fail "the fake remote measured nothing"
K=$(cat "$DIR/kernel_bytes")
L=$((64 + 6 + SIZE))
MAXFAIL=$(( (K + L - 1) / L ))
failed=$(cat "$DIR"/xreq-*.out | grep -c "^FAILED error=104")
served=$(cat "$DIR"/xreq-*.out | grep -c "^SERVED")
echo "$K bytes written by A before the reset: at most $MAXFAIL of $N requests (partly) written;" \
	"$failed failed ECONNRESET, $served served on the next connection"
other=$((N - failed - served))
[ "$other" = 0 ] || fail "$other requests neither served nor failed ECONNRESET: $(cat "$DIR"/xreq-*.out)"
[ "$failed" -le "$MAXFAIL" ] ||
	fail "$failed requests failed ECONNRESET, but at most $MAXFAIL had a byte written: requests never written were failed instead of sent on the next connection"
echo "PASS"
