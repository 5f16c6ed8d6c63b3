#!/usr/bin/env bash
# synapsed against clients that hold on to it (every one from an allowed
# address): 100 idle sockets and 10 frames that announce 60 MiB and stop
# part way cost synapsed B bounded memory (--max-inflight-bytes) and do not
# lock its real remote out (a full table evicts the longest-idle socket);
# verified traffic crosses while they are open. Then, with short limits: an
# idle connection is closed after --idle-timeout, a frame not complete
# within --timeout is closed (also one that keeps trickling), a request over
# what a connection may hold is closed; each with a log line at the default
# log level and its counter.
#   bench-xseg (A) -> synapsed A ==TCP==> synapsed B -> filed (B)
set -u
SEG_PREFIX=synapsed-limits
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

echo "--- arguments"
expect_exit 0 "$BIN/synapsed" --help
for opt in "--idle-timeout S" "--max-inflight-bytes SIZE" "--max-connections N"; do
	grep -q -- "$opt" "$DIR/out" || fail "--help does not list $opt"
done
for bad in "--idle-timeout x" "--idle-timeout -1" "--max-inflight-bytes 12Q" \
	   "--max-inflight-bytes 1K" "--max-connections 0" "--max-connections 99999"; do
	set -- $bad
	expect_exit 2 "$BIN/synapsed" --segment x --port 1 --listen 127.0.0.1:1 --target-port 1 "$1" "$2"
	grep -q -- "'$2'" "$DIR/err" || fail "$1 $2: the bad value is not named"
	[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "$1 $2: more than one line"
done

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 512 --heap 64M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
PORT=$(free_port)
# Default log level: what an operator sees. 128M: two of the 60 MiB frames
# get their bodies reserved, the others wait unread.
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 1 \
	--max-inflight-bytes 128M 2> "$DIR/synapsed-b.log" & bpid=$!
pids+=($bpid)
wait_bound_in "$SEGB" 2
start_a() {
	"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$PORT" --timeout 20 \
		--log-level info 2> "$DIR/synapsed-a.log" & apid=$!
	pids+=($apid)
	wait_bound_in "$SEG" 2
	wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$PORT"
}
start_a
bench_ok "$SEG" 10 2 --op write --pattern seq --total-size 8M --block-size 64K --iodepth 16 --object-size 1M --seed 1
bench_ok "$SEG" 10 2 --op read --pattern seq --total-size 8M --block-size 64K --iodepth 16 --object-size 1M --seed 1
# A leaves: its slot goes to the junk below, and the new A must get in.
kill -TERM "$apid"; wait "$apid" || fail "synapsed A exited non-zero on SIGTERM"
: > "$DIR/synapsed-a.log"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
rss0=$(rss_kib "$bpid")

echo "--- 10 frames of 60 MiB stopped part way and 100 idle sockets"
# Each frame's header says 60 MiB of WRITE data; 16 MiB of it is sent (or
# what B takes within 5 s), then nothing. Then 100 sockets that send nothing.
# All stay open until this script kills the holder.
python3 - "$PORT" "$DIR/junk.ready" > "$DIR/junk.out" 2>&1 <<'PY' & junkpid=$!
import selectors, socket, struct, sys, time
port, ready = int(sys.argv[1]), sys.argv[2]
body = 60 << 20
hdr = struct.pack('<IHBBIIQQQQiIQ', 0x4e595358, 1, 1, 0, 2, 0, 1, 0, body, 0, 0, 4, body)
frames = []
for i in range(10):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    frames.append([s, memoryview(hdr + b'junk' + b'z' * (16 << 20))])
sel = selectors.DefaultSelector()
for f in frames:
    sel.register(f[0], selectors.EVENT_WRITE, f)
end = time.time() + 5
while sel.get_map() and time.time() < end:
    for key, _ in sel.select(timeout=0.2):
        f = key.data
        try:
            n = f[0].send(f[1][:1 << 20])
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            n = len(f[1])
        f[1] = f[1][n:]
        if not len(f[1]):
            sel.unregister(f[0])
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
open(ready, 'w').write('%d\n' % sum((16 << 20) + 68 - len(f[1]) for f in frames))
time.sleep(120)
PY
pids+=($junkpid)
for _ in $(seq 200); do [ -s "$DIR/junk.ready" ] && break; sleep 0.05; done
[ -s "$DIR/junk.ready" ] || fail "the junk connections did not get going: $(cat "$DIR/junk.out")"
echo "junk frames sent $(( $(cat "$DIR/junk.ready") >> 20 )) MiB in all"
sleep 1   # B reads what it will

echo "--- the remote comes back while the table is full: it gets in, verified traffic crosses"
start_a
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size 16M --block-size 64K --iodepth 16 --object-size 1M --seed 2
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size 16M --block-size 64K --iodepth 16 --object-size 1M --seed 2
bench_ok "$SEG" 11 2 --op write --pattern seq --total-size 8M --block-size 1M --iodepth 4 --object-size 1M --seed 3
bench_ok "$SEG" 11 2 --op read --pattern seq --total-size 8M --block-size 1M --iodepth 4 --object-size 1M --seed 3
kill -0 "$junkpid" 2>/dev/null || fail "the junk holder ended early: $(cat "$DIR/junk.out")"
rss1=$(rss_kib "$bpid")
extra=$(( (rss1 - rss0) / 1024 ))
echo "synapsed B: VmRSS $((rss0 / 1024)) MiB before, $((rss1 / 1024)) MiB with the junk open (+$extra MiB)"
# (a sanitizer's shadow memory grows with every byte touched: no figure to hold it to)
if [ -n "${SANITIZE:-}" ]; then
	echo "SANITIZE=$SANITIZE: the RSS bound is not checked"
else
	[ "$extra" -lt 64 ] || fail "the junk connections cost synapsed B $extra MiB (limit 64)"
fi
grep -q "evicted: 64 connections open (--max-connections) and it was the most evictable (idle, never sent a frame" \
	"$DIR/synapsed-b.log" || fail "no eviction logged at the default log level"
grep "evicted" "$DIR/synapsed-b.log" | grep -q "127.0.0.1:" || fail "the eviction does not name the peer"
kill "$junkpid"; wait "$junkpid" 2>/dev/null

echo "--- short limits: --idle-timeout 1, --timeout 2, --max-inflight-bytes 1M, --max-connections 3"
P2=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 3 --listen "127.0.0.1:$P2" --target-port 1 \
	--idle-timeout 1 --timeout 2 --max-inflight-bytes 1M --max-connections 3 \
	2> "$DIR/synapsed-b2.log" & b2pid=$!
pids+=($b2pid)
wait_bound_in "$SEGB" 3
# hold MODE: connects to B2 and prints the seconds until B2 closes it (or
# "open" after 10 s). MODE: idle (sends nothing), ping (one PING, then
# silence), header (half a header), body (a header and half its body),
# trickle (a frame sent a byte every 0.3 s), big (a 2 MiB WRITE).
hold() {
	python3 - "$P2" "$1" <<'PY'
import socket, struct, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
def frame(op, dl):
    return struct.pack('<IHBBIIQQQQiIQ', 0x4e595358, 1, 1, 0, op, 0, 9, 0, dl, 0, 0, 0, dl)
s = socket.create_connection(("127.0.0.1", port))
t0 = time.time()
send = {'idle': b'', 'ping': frame(0, 0), 'header': frame(2, 4096)[:30],
        'body': frame(2, 4096) + b'x' * 2048, 'big': frame(2, 2 << 20)}.get(mode, b'')
s.sendall(send)
if mode == 'trickle':
    s.settimeout(0.3)
    for b in frame(2, 64) + b'y' * 64:
        try:
            s.send(bytes([b]))
            if s.recv(1) == b'':
                break
        except socket.timeout:
            continue
        except OSError:
            break
s.settimeout(max(0.1, t0 + 10 - time.time()))
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
    print('%.1f' % (time.time() - t0))
except socket.timeout:
    print('open')
except OSError:
    print('%.1f' % (time.time() - t0))
PY
}
within() {   # WHAT SECONDS MIN MAX
	[ "$2" != open ] || fail "$1: never closed"
	python3 -c "import sys; sys.exit(0 if $3 <= $2 <= $4 else 1)" ||
		fail "$1: closed after $2 s, expected $3..$4 s"
}
t=$(hold idle); within "an idle connection" "$t" 0.9 4
wait_log "$DIR/synapsed-b2.log" "connection 127.0.0.1:[0-9]* closed: idle for 1 s (--idle-timeout; idle closes so far: 1)"
t=$(hold ping); within "an idle connection after a PING" "$t" 0.9 4
wait_log "$DIR/synapsed-b2.log" "idle closes so far: 2)"
t=$(hold header); within "half a header" "$t" 1.9 5
wait_log "$DIR/synapsed-b2.log" "closed: a frame not complete within --timeout 2 s (frame timeouts so far: 1)"
t=$(hold body); within "a header and half its body" "$t" 1.9 5
wait_log "$DIR/synapsed-b2.log" "frame timeouts so far: 2)"
t=$(hold trickle); within "a frame trickling in" "$t" 1.9 5
wait_log "$DIR/synapsed-b2.log" "frame timeouts so far: 3)"
t=$(hold big); within "a request over what a connection may hold" "$t" 0 2
wait_log "$DIR/synapsed-b2.log" "a WRITE request needs 2097152 bytes, more than a connection may hold"
# A table full of frames whose headers wait for room (one 768K WRITE gets
# the budget and stops part way, two more wait behind it): a newcomer evicts
# a waiting one and is served.
python3 - "$P2" > "$DIR/waiters.out" 2>&1 <<'PY'
import socket, struct, sys, time
port = int(sys.argv[1])
def frame(op, dl, fid):
    return struct.pack('<IHBBIIQQQQiIQ', 0x4e595358, 1, 1, 0, op, 0, fid, 0, dl, 0, 0, 0, dl)
held = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(frame(2, 768 << 10, i) + b'w' * 1000)
    held.append(s)
    time.sleep(0.1)
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(1.5)
s.sendall(frame(0, 0, 77))
reply = s.recv(64)
print('served' if len(reply) == 64 and struct.unpack('<Q', reply[16:24])[0] == 77 else 'not served')
PY
grep -qx served "$DIR/waiters.out" || fail "a newcomer to a table of waiting headers: $(cat "$DIR/waiters.out")"
wait_log "$DIR/synapsed-b2.log" "it was the most evictable (waiting for room, nothing out"
grep -c "closed: idle" "$DIR/synapsed-b2.log" | grep -qx 2 ||
	fail "a connection under way was closed as idle: $(grep 'closed: idle' "$DIR/synapsed-b2.log")"
kill -TERM "$b2pid"; wait "$b2pid" || fail "synapsed B2 exited non-zero on SIGTERM"
grep -q "connection limits: 2 closed idle, [34] closed with a frame incomplete after --timeout, 1 evicted, 0 refused (table full), 1 closed for a request over --max-inflight-bytes, 2 waits for --max-inflight-bytes" \
	"$DIR/synapsed-b2.log" || fail "the counters at exit are wrong: $(grep 'connection limits' "$DIR/synapsed-b2.log")"

kill -TERM "$apid"; wait "$apid" || fail "synapsed A exited non-zero on SIGTERM"
kill -TERM "$bpid"; wait "$bpid" || fail "synapsed B exited non-zero on SIGTERM"
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed limits: ok"
