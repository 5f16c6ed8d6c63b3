#!/usr/bin/env bash
# A remote whose READ reply says serviced = size but carries fewer data
# bytes (none, or a few): synapsed A answered the READ SERVED with
# serviced = size, and the request's buffer past the bytes received kept
# whatever the segment's heap held there before (another request's data,
# here an earlier WRITE's). The protocol: a served READ carries
# min(serviced, datalen) bytes; anything else is a protocol error, never
# stale heap bytes handed to the requester as read data. The same for an
# INFO reply that says serviced = 8 and carries no struct xseg_reply_info.
set -u
SEG_PREFIX=synapsed-short
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M || fail "create A"
FP=$(free_port)
# The fake remote answers every request SERVED, serviced = size, with
# data_len 0 (cases 1, 3) or 4 bytes 'zzzz' (case 2), on the one connection.
python3 - "$FP" > "$DIR/fake.out" 2>&1 <<'PY' & fakepid=$!
import socket, struct, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen(4); srv.settimeout(30)
def recv_exact(c, n):
    b = b''
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
while True:   # synapsed A closes on a protocol error and connects again
    try:
        c, _ = srv.accept()
    except socket.timeout:
        break
    c.settimeout(30)
    try:
        while True:
            f = struct.unpack('<IHBBIIQQQQiIQ', recv_exact(c, 64))
            magic, ver, kind, res, op, flags, fid, off, size, serv, err, tl, dl = f
            recv_exact(c, tl + dl)
            if kind == 3:   # the hello: nothing to answer
                continue
            data = b'zzzz' if op == 1 and off == 4096 else b''
            if op == 5:   # INFO: serviced = sizeof(struct xseg_reply_info), no data
                size = 8
            c.sendall(struct.pack('<IHBBIIQQQQiIQ', magic, 1, 2, 1, op, 0, fid, off, size,
                                  size, 0, 0, len(data)) + data)
            print('answered op', op, 'size', size, 'data', len(data), flush=True)
    except (EOFError, socket.timeout, ConnectionResetError, BrokenPipeError):
        c.close()
PY
pids+=($fakepid)
"$BIN/synapsed" --segment "$SEG" --port 9 --remote "127.0.0.1:$FP" --timeout 5 \
	--log-level info 2> "$DIR/synapsed-a.log" & pids+=($!)
wait_bound 9
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$FP"

# Another client's data passes through the heap: a WRITE of 4K.
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op write --target obj-other \
	--size 4K --data SECRET-OF-ANOTHER-CLIENT-)
[ "${out%% *}" = SERVED ] || fail "WRITE through the fake remote: got '$out'"

echo "--- case 1: READ of 4K, reply serviced=4096 with no data"
out=$("$BIN/xreq" --segment "$SEG" --port 13 --target-port 9 --op read --target obj-x --size 4K)
echo "xreq: $out"
case $out in
*SECRET*) fail "a READ reply without data was answered with stale heap bytes: '$out'" ;;
SERVED*) fail "a READ reply with 0 of 4096 bytes was answered SERVED: '$out'" ;;
esac

# connections N: after each protocol error A closes its connection and
# connects again; waits for its Nth (10 s at most)
connections() {
	for _ in $(seq 200); do
		[ "$(grep -c "connected to 127.0.0.1:$FP" "$DIR/synapsed-a.log")" -ge "$1" ] && return 0
		sleep 0.05
	done
	fail "synapsed A did not connect a ${1}th time"
}
grep -q "says 4096 bytes served but carries 0: protocol error" "$DIR/synapsed-a.log" ||
	fail "the short READ reply was not called a protocol error"
connections 2
echo "--- case 2: READ of 4K, reply serviced=4096 with 4 bytes"
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op write --target obj-other \
	--size 4K --data SECRET-OF-ANOTHER-CLIENT-)
out=$("$BIN/xreq" --segment "$SEG" --port 13 --target-port 9 --op read --target obj-x \
	--offset 4096 --size 4K)
echo "xreq: $out"
case $out in
*SECRET*) fail "a READ reply with 4 of 4096 bytes was answered with stale heap bytes: '$out'" ;;
SERVED*) fail "a READ reply with 4 of 4096 bytes was answered SERVED: '$out'" ;;
esac

connections 3
echo "--- case 3: INFO, reply serviced=8 (its struct xseg_reply_info) with no data"
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op write --target obj-other \
	--size 8 --data AAAAAAAA)
out=$("$BIN/xreq" --segment "$SEG" --port 13 --target-port 9 --op info --target obj-x)
echo "xreq: $out"
case $out in
*size=4702111234474983745*) fail "an INFO reply without data was answered with stale heap bytes: '$out'" ;;
SERVED*) fail "an INFO reply with 0 of 8 bytes was answered SERVED: '$out'" ;;
esac
echo "short READ and INFO replies refused: ok"
