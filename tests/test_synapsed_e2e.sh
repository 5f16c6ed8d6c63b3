#!/usr/bin/env bash
# run-tests: alone (it times how soon failures are seen: with tests beside it, bench-xseg
# once took 15 s to see the loss)
# synapsed end to end on one machine: two segments bridged over loopback,
#   bench-xseg (segment A) -> synapsed A ==TCP==> synapsed B -> cached -> filed (segment B)
# verified data (seq and rand, small and large blocks), every op crossing,
# malformed frames from a raw socket (connection dropped and logged, peer
# keeps serving), a remote that sends bad replies, --allow refusing others, the remote killed mid-run
# (failures reported, no hang) and restarted (traffic resumes), SIGTERM.
set -u
SEG_PREFIX=synapsed-e2e
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

echo "--- arguments"
expect_exit 0 "$BIN/synapsed" --help
expect_exit 0 "$BIN/xreq" --help
expect_exit 2 "$BIN/synapsed" --segment x --port 1
grep -q -- "--listen or --remote" "$DIR/err" || fail "missing --listen/--remote not explained"
for bad in "--listen 127.0.0.1" "--listen 1.2.3.4:99999" "--remote nohost.invalid:7" \
	   "--allow 300.1.1.1" "--timeout 0" "--target-port x" "--net-spin-us x" \
	   "--retry-limit 0" "--retry-limit 3601" "--retry-limit 5s"; do
	set -- $bad
	expect_exit 2 "$BIN/synapsed" --segment x --port 1 --target-port 1 "$1" "$2"
	grep -q -- "'$2'" "$DIR/err" || fail "$1 $2: the bad value is not named"
	[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "$1 $2: more than one line"
done
expect_exit 2 "$BIN/xreq" --segment x --port 1 --target-port 2 --op frob
grep -q "'frob'" "$DIR/err" || fail "xreq: bad op not named"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 128M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 16M --max-objects 64 \
	--object-size 1M --threads 2 2> "$DIR/cached.log" & pids+=($!)
wait_bound_in "$SEGB" 3
PORT=$(free_port)
start_b() {
	"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 3 \
		--allow 127.0.0.1 --log-level info 2>> "$DIR/synapsed-b.log" & bpid=$!
	pids+=($bpid)
	wait_bound_in "$SEGB" 2
}
start_b
"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$PORT" --timeout 3 \
	--log-level info 2> "$DIR/synapsed-a.log" & apid=$!
pids+=($apid)
wait_bound_in "$SEG" 2
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$PORT"

echo "--- verified data across the link"
T=$(scaled 16384)K
bench_ok "$SEG" 10 2 --op write --pattern seq --total-size "$T" --block-size 64K --iodepth 16 --object-size 1M --seed 1
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size "$T" --block-size 4K --iodepth 16 --object-size 1M --seed 1
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size "$T" --block-size 4K --iodepth 8 --object-size 1M --seed 2
bench_ok "$SEG" 10 2 --op read --pattern seq --total-size "$T" --block-size 64K --iodepth 1 --object-size 1M --seed 2
# large requests (1M) in flight together with small ones
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size "$T" --block-size 1M --iodepth 4 --object-size 1M --seed 3 &
bg=$!
bench_ok "$SEG" 11 2 --op write --pattern rand --total-size "$(scaled 2048)K" --block-size 4K --iodepth 4 --object-size 1M --seed 4
wait $bg || fail "large writes alongside small ones"
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size "$T" --block-size 1M --iodepth 4 --object-size 1M --seed 3

echo "--- two connections into synapsed B at once"
"$BIN/synapsed" --segment "$SEG" --port 5 --remote "127.0.0.1:$PORT" --timeout 10 \
	--log-level info 2> "$DIR/synapsed-a2.log" & a2pid=$!
pids+=($a2pid)
wait_log "$DIR/synapsed-a2.log" "connected to 127.0.0.1:$PORT"
bench_ok "$SEG" 13 5 --op write --pattern rand --total-size "$T" --block-size 8K --iodepth 16 --object-size 1M --seed 7 &
bg=$!
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size "$T" --block-size 8K --iodepth 16 --object-size 1M --seed 8
wait $bg || fail "writes through the second connection"
bench_ok "$SEG" 13 2 --op read --pattern rand --total-size "$T" --block-size 8K --iodepth 16 --object-size 1M --seed 7
bench_ok "$SEG" 10 5 --op read --pattern rand --total-size "$T" --block-size 8K --iodepth 16 --object-size 1M --seed 8
kill -TERM "$a2pid"; wait "$a2pid" || fail "synapsed A2 exited non-zero on SIGTERM"

echo "--- depth 1 with long spins: the network threads serve the ports, the workers parked"
# With --net-spin-us longer than a round trip each network thread takes its
# side's requests and replies itself (peer_helper_poll) with the workers
# parked; requests at depth 1 only, then a burst that unparks them, then a
# stop while they may be parked.
P3=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 7 --listen "127.0.0.1:$P3" --target-port 3 \
	--net-spin-us 5000 --log-level info 2> "$DIR/synapsed-b3.log" & b3pid=$!
pids+=($b3pid)
wait_bound_in "$SEGB" 7
"$BIN/synapsed" --segment "$SEG" --port 6 --remote "127.0.0.1:$P3" --net-spin-us 5000 --timeout 10 \
	--log-level info 2> "$DIR/synapsed-a3.log" & a3pid=$!
pids+=($a3pid)
wait_log "$DIR/synapsed-a3.log" "connected to 127.0.0.1:$P3"
bench_ok "$SEG" 10 6 --op write --pattern rand --total-size "$(scaled 4096)K" --block-size 4K --iodepth 1 --object-size 1M --seed 11
bench_ok "$SEG" 10 6 --op read --pattern seq --total-size "$(scaled 4096)K" --block-size 4K --iodepth 1 --object-size 1M --seed 11
bench_ok "$SEG" 10 6 --op write --pattern rand --total-size "$T" --block-size 8K --iodepth 16 --object-size 1M --seed 12
bench_ok "$SEG" 10 6 --op read --pattern rand --total-size "$(scaled 2048)K" --block-size 8K --iodepth 1 --object-size 1M --seed 12
kill -TERM "$a3pid"; wait "$a3pid" || fail "synapsed A3 exited non-zero on SIGTERM"
kill -TERM "$b3pid"; wait "$b3pid" || fail "synapsed B3 exited non-zero on SIGTERM"

echo "--- every op crosses: the same answer as on segment B itself"
xreq_a() { "$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 "$@"; }
xreq_b() { "$BIN/xreq" --segment "$SEGB" --port 12 --target-port 3 "$@"; }
same() {   # both sides answer the same; the answer in $SAME
	local b
	SAME=$(xreq_a "$@" 2> "$DIR/xreq-a.err"); b=$(xreq_b "$@" 2> "$DIR/xreq-b.err")
	[ "$SAME" = "$b" ] || fail "xreq $*: over synapsed '$SAME', on B '$b'"
}
expect() {   # REGEX WHAT: $SAME matches
	echo "$SAME" | grep -Eq -- "$1" || fail "$2: got '$SAME'"
}
out=$(xreq_a --op write --target obj-x --size 8K --data "hello synapsed ") || fail "WRITE: $out"
same --op read --target obj-x --size 16 --offset 0
expect "data='hello synapsed h'" "READ data"
same --op info --target obj-x
expect "SERVED.*size=8192" "INFO: size did not cross"
out=$(xreq_a --op copy --target obj-y --src obj-x) || fail "COPY: $out"
same --op read --target obj-y --size 15 --offset 0
expect "data='hello synapsed '" "COPY did not copy"
same --op flush --target obj-y
expect SERVED "FLUSH"
same --op ping
expect SERVED "PING"
out=$(xreq_a --op delete --target obj-y) || fail "DELETE: $out"
# (cached answers INFO of a deleted object with size 0)
same --op info --target obj-y
expect "FAILED error=2 |size=0$" "DELETE: obj-y still there"
same --op read --target obj-y --size 4K
# a peer's CONTROL command crosses too: cached switches its policy and answers
out=$(xreq_a --op control --data "policy writeback") || fail "CONTROL over synapsed: $out"
# "stats" is the runtime's: each synapsed answers with its own figures (A:
# the requests it carried out, B: those it served for the network)
for s in "$SEG" "$SEGB"; do
	"$BIN/xseg" stats --segment "$s" --port 2 --json > "$DIR/stats" || fail "xseg stats of synapsed on $s"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["peer"]=="synapsed" and d["requests"]>100 and d["bytes_written"]>0 and d["lat_us_p99"]>0, d' "$DIR/stats" ||
		fail "synapsed's figures on $s: $(cat "$DIR/stats")"
done

echo "--- malformed frames: connection dropped and logged, the peer keeps serving"
check_drop() {   # reason-in-log spec...
	local why=$1; shift
	local got
	got=$(raw_frames 127.0.0.1 "$PORT" "$@") || fail "raw frames: python failed"
	[ "$got" = closed ] || fail "frames $*: connection not dropped"
	wait_log "$DIR/synapsed-b.log" "$why"
}
check_drop "bad frame: bad magic" 1:1:1:4:0:0x12345678
check_drop "bad frame: unknown protocol version" 1:1:1:4:0:0x4e595358:2
check_drop "bad frame: target or data length over the limit" 1:2:1:4:0x4000001
check_drop "bad frame: target or data length over the limit" 1:2:1:256:0
check_drop "bad frame: unknown op" 1:99:1:4:0
check_drop "reply to request id 0x1234 that is not in flight" 2:1:0x1234:0:0
check_drop "in the middle of a frame" 1:2:7:4:100:0x4e595358:1:0
[ "$(raw_frames 127.0.0.1 "$PORT" 1:0:5:0:0)" = open ] || fail "a good PING frame closed the connection"
kill -0 "$bpid" || fail "synapsed B died on bad input"
bench_ok "$SEG" 10 2 --op read --pattern seq --total-size "$T" --block-size 64K --iodepth 4 --object-size 1M --seed 1

echo "--- --allow refuses other addresses"
P2=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 4 --listen "127.0.0.1:$P2" --target-port 3 \
	--allow 10.77.0.1 --allow ::2 --log-level info 2> "$DIR/synapsed-deny.log" & pids+=($!)
wait_bound_in "$SEGB" 4
[ "$(raw_frames 127.0.0.1 "$P2" 1:0:5:0:0)" = closed ] || fail "a connection not in --allow was served"
wait_log "$DIR/synapsed-deny.log" "refused: not in --allow"

echo "--- a remote that answers badly: its connection is dropped, the request fails, nothing is read past its buffer"
# Cases 3 and 4 stop in the middle of a READ reply's data, which synapsed
# reads straight into the request: closing fails it at once, stalling fails
# it once --timeout passes; either way the request is answered exactly once.
FP=$(free_port)
python3 - "$FP" > "$DIR/fake.out" 2>&1 <<'PY' & fakepid=$!
import socket, struct, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen(4); srv.settimeout(30)
def recv_frame(c):   # the next request (a hello, first on each connection, skipped)
    while True:
        hdr = b''
        while len(hdr) < 64:
            hdr += c.recv(64 - len(hdr))
        f = struct.unpack('<IHBBIIQQQQiIQ', hdr)
        body = f[11] + f[12]
        while body > 0:
            body -= len(c.recv(body))
        if f[2] != 3:
            return f
# 1: a READ reply with more data than asked for; 2: a reply to another id;
# 3: half the data, then the connection closes; 4: half the data, then
# nothing (synapsed must cut the connection itself)
for case in (1, 2, 3, 4):
    c, _ = srv.accept()
    magic, ver, kind, res, op, flags, fid, off, size, serv, err, tl, dl = recv_frame(c)
    if case == 1:
        c.sendall(struct.pack('<IHBBIIQQQQiIQ', magic, 1, 2, 1, op, 0, fid, off, size * 2,
                              size * 2, 0, 0, size * 2) + b'z' * (size * 2))
    elif case == 2:
        c.sendall(struct.pack('<IHBBIIQQQQiIQ', magic, 1, 2, 1, op, 0, fid ^ (1 << 40), off,
                              size, size, 0, 0, size) + b'z' * size)
    else:
        c.sendall(struct.pack('<IHBBIIQQQQiIQ', magic, 1, 2, 1, op, 0, fid, off, size,
                              size, 0, 0, size) + b'z' * (size // 2))
        if case == 3:
            c.close()
            print('closed')
            continue
    try:
        print('closed' if c.recv(1 << 16) == b'' else 'open')
    except ConnectionResetError:
        print('closed')
    c.close()
PY
pids+=($fakepid)
"$BIN/synapsed" --segment "$SEG" --port 9 --remote "127.0.0.1:$FP" --timeout 5 \
	--log-level info 2> "$DIR/synapsed-fake.log" & pids+=($!)
wait_bound_in "$SEG" 9
wait_log "$DIR/synapsed-fake.log" "connected to 127.0.0.1:$FP"
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op read --target obj-x --size 4K)
[ "$out" = "FAILED error=104 (Connection reset by peer)" ] || fail "oversized reply: got '$out'"
wait_log "$DIR/synapsed-fake.log" "carries 8192 bytes, at most 4096 expected: protocol error"
for _ in $(seq 100); do [ "$(grep -c "connected to" "$DIR/synapsed-fake.log")" -ge 2 ] && break; sleep 0.05; done
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op read --target obj-x --size 4K)
[ "$out" = "FAILED error=104 (Connection reset by peer)" ] || fail "reply to another id: got '$out'"
wait_log "$DIR/synapsed-fake.log" "that is not in flight here: protocol error"
for _ in $(seq 100); do [ "$(grep -c "connected to" "$DIR/synapsed-fake.log")" -ge 3 ] && break; sleep 0.05; done
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op read --target obj-x --size 64K)
[ "$out" = "FAILED error=104 (Connection reset by peer)" ] || fail "reply cut in its data: got '$out'"
for _ in $(seq 100); do [ "$(grep -c "connected to" "$DIR/synapsed-fake.log")" -ge 4 ] && break; sleep 0.05; done
start=$SECONDS
out=$("$BIN/xreq" --segment "$SEG" --port 12 --target-port 9 --op read --target obj-x --size 64K)
[ "$out" = "FAILED error=110 (Connection timed out)" ] || fail "reply stalled in its data: got '$out'"
[ $((SECONDS - start)) -le 8 ] || fail "a stalled reply took $((SECONDS - start)) s to fail (--timeout 5)"
wait_log "$DIR/synapsed-fake.log" "a reply stopped in the middle of its data"
wait "$fakepid" || fail "the fake remote failed: $(cat "$DIR/fake.out")"
[ "$(grep -c closed "$DIR/fake.out")" = 4 ] || fail "a bad reply did not close the connection: $(cat "$DIR/fake.out")"

echo "--- remote killed mid-run: failures reported, no hang; restarted: traffic resumes"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op write --pattern seq \
	--total-size 16G --block-size 64K --iodepth 16 --object-size 1M --seed 5 --timeout 20 \
	--json > "$DIR/kill.out" 2> "$DIR/kill.err" & bg=$!
sleep 1
# 16G, not 1G: a quiet machine moved 1G through the bridge in under the
# second, and the run ended before the kill it is there to see.
kill -0 "$bg" 2>/dev/null || fail "the run ended before the remote was killed: $(cat "$DIR/kill.err")"
kill -KILL "$bpid"
start=$SECONDS
wait $bg && fail "bench-xseg did not report the lost remote"
[ $((SECONDS - start)) -lt 15 ] || fail "bench-xseg took $((SECONDS - start)) s to see the loss"
grep -q "failed" "$DIR/kill.out" "$DIR/kill.err" || fail "no failures reported"
wait_log "$DIR/synapsed-a.log" "connection 127.0.0.1:$PORT closed"
# while B is down requests fail within --timeout (3 s), they do not hang
out=$(xreq_a --op ping --timeout 20); rc=$?
[ $rc -eq 1 ] || fail "PING with the remote down: exit $rc ($out)"
start_b
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$PORT" 10
ok=0
for _ in $(seq 50); do
	xreq_a --op ping > /dev/null 2>&1 && { ok=1; break; }
	sleep 0.1
done
[ $ok = 1 ] || fail "no traffic after the remote came back"
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size "$T" --block-size 16K --iodepth 16 --object-size 1M --seed 6
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size "$T" --block-size 16K --iodepth 16 --object-size 1M --seed 6
grep -q "answered twice\|not ours" "$DIR"/*.log && fail "a request was answered twice"

echo "--- SIGTERM under load: both synapsed exit 0"
( sleep 0.5; kill -TERM "$apid" ) &
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --op read --pattern seq \
	--total-size 4G --block-size 4K --iodepth 8 --object-size 1M --seed 6 --timeout 10 \
	> /dev/null 2>&1
wait "$apid" || fail "synapsed A exited non-zero on SIGTERM"
kill -TERM "$bpid"
wait "$bpid" || fail "synapsed B exited non-zero on SIGTERM"
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed end to end: ok"
