# Shared by the synapsed end-to-end scripts (sourced after lib.sh): a second
# segment, free TCP ports, raw frames from python3, bench runs that must be
# clean. Everything is removed on exit, also on failure.
SEGB=$SEG-b
trap 'cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT
SCALE=${XSEG_STRESS_SCALE:-1}

# A TCP port nobody listens on now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_bound_in SEGMENT PORT: lib.sh's wait_bound on another segment
# (bash's dynamic scope: wait_bound sees this SEG).
wait_bound_in() { local SEG=$1; wait_bound "$2"; }

# wait_log FILE TEXT [SECONDS]: TEXT appears in FILE.
wait_log() {
	local tries=$(( ${3:-10} * 20 ))
	for _ in $(seq $tries); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	fail "'$2' never appeared in $(basename "$1")"
}

# scaled SIZE_IN_K: SIZE * SCALE, in K, a multiple of 1M, at least 1M.
scaled() { python3 -c "print(max(1024, int($1 * $SCALE)) // 1024 * 1024)"; }

# bench_ok SEGMENT PORT TARGET_PORT ARGS...: a verified run, 0 failed/corrupted.
# Runs may go on at once from different ports (output per port).
bench_ok() {
	local seg=$1 port=$2 tport=$3; shift 3
	local out=$DIR/bench-$port.out err=$DIR/bench-$port.err
	"$BIN/bench-xseg" --segment "$seg" --port "$port" --target-port "$tport" \
		--verify full --timeout 60 --json "$@" > "$out" 2> "$err" ||
		{ cat "$err"; tail -2 "$out"; fail "bench-xseg $*"; }
	tail -1 "$out" | grep -q '"failed":0,"corrupted":0' ||
		fail "bench-xseg $* counted failures: $(tail -1 "$out")"
}

# raw_frames HOST PORT SPEC...: connects and sends frames, then waits for the
# peer to close (3 s at most); prints "closed" or "open". A SPEC is
# kind:op:id:target_len:data_len[:magic[:version[:send_body]]].
raw_frames() {
	python3 - "$@" <<'PY'
import socket, struct, sys, time
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=5)
for spec in sys.argv[3:]:
    f = spec.split(':')
    kind, op, fid, tl, dl = (int(x, 0) for x in f[:5])
    magic = int(f[5], 0) if len(f) > 5 else 0x4e595358
    version = int(f[6], 0) if len(f) > 6 else 1
    body = int(f[7]) if len(f) > 7 else 1
    result = 1 if kind == 2 else 0
    hdr = struct.pack('<IHBBIIQQQQiIQ', magic, version, kind, result, op, 0, fid,
                      0, 4096, 0, 0, tl, dl)
    try:
        s.sendall(hdr + (b'x' * (tl + dl) if body else b''))
    except (ConnectionResetError, BrokenPipeError):
        print('closed')
        sys.exit(0)
    if not body:   # a truncated frame: the sender closes its side
        s.shutdown(socket.SHUT_WR)
try:
    s.settimeout(3)
    data = s.recv(1 << 16)
    while data:
        data = s.recv(1 << 16)
    print('closed')
except socket.timeout:
    print('open')
except (ConnectionResetError, BrokenPipeError):
    print('closed')
PY
}

# netns_pair NAME V: two network namespaces NSA and NSB (NAME-a-PID,
# NAME-b-PID) joined by a veth pair (V a PID, V b PID) on $NET.0/24, A at
# .1 and B at .2, removed on exit; where they cannot be made, says SKIP
# and exits 0.
netns_pair() {
	NSA=$1-a-$$ NSB=$1-b-$$ VA=$2a$$ VB=$2b$$
	NET=10.$((200 + $$ % 50)).$(( ($$ / 50) % 250 ))
	trap 'cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null;
	      ip netns del "$NSA" 2>/dev/null; ip netns del "$NSB" 2>/dev/null' EXIT
	if ! command -v ip > /dev/null || ! ip netns add "$NSA" 2> "$DIR/ns.err"; then
		echo "SKIP: cannot make network namespaces here (needs root and iproute2): $(cat "$DIR/ns.err" 2>/dev/null)"
		exit 0
	fi
	{ ip netns add "$NSB" && ip link add "$VA" type veth peer name "$VB" &&
	  ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
	  ip -n "$NSA" addr add "$NET.1/24" dev "$VA" && ip -n "$NSB" addr add "$NET.2/24" dev "$VB" &&
	  ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up &&
	  ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up; } 2> "$DIR/ns.err" || {
		echo "SKIP: namespaces, but no veth pair here: $(cat "$DIR/ns.err")"
		exit 0
	}
}

# link_ab TIMEOUT: both segments, filed (2 threads, $fpid) on B's port 1,
# synapsed B listening on port 2 ($P), synapsed A on A's port 2 sending to
# it with --timeout TIMEOUT, connected.
link_ab() {
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create A"
	"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 64M || fail "create B"
	"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
	fpid=$!; pids+=($fpid)
	wait_bound_in "$SEGB" 1
	P=$(free_port)
	"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$P" --target-port 1 \
		--log-level info 2> "$DIR/synapsed-b.log" & pids+=($!)
	wait_bound_in "$SEGB" 2
	"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$P" --timeout "$1" \
		--log-level info 2> "$DIR/synapsed-a.log" & pids+=($!)
	wait_bound 2
	wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$P"
}
