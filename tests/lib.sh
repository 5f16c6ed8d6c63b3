# Shared by the end-to-end scripts (sourced, not run): a segment and a
# scratch directory per script, peers killed and everything removed on
# exit, failures that show the peers' logs.
#   SEG, DIR, BIN are set; start peers with `... & pids+=($!)`.
BIN=${BIN:-$PWD/build/bin}
SEG=${SEG_PREFIX:-e2e}-$$
DIR=$(mktemp -d)
pids=()

fail() {
	echo "FAIL: $*"
	for log in "$DIR"/*.log; do
		[ -s "$log" ] && { echo "== $log"; tail -"${LOG_LINES:-40}" "$log"; }
	done
	exit 1
}

# Peers get SIGTERM and two seconds; what still runs then is killed.
stop_peers() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 40); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.05
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
}

cleanup() {
	stop_peers
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

# json FILE FIELD: FIELD of the JSON object on FILE's last line (bench-xseg --json).
json() { tail -1 "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$2"; }

# peer_stat PORT FIELD: a figure of the peer serving PORT (xseg stats --json).
peer_stat() {
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json |
		python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$2"
}

# port_info PORT FIELD: PORT's FIELD in xseg info --json --all (None: null).
port_info() {
	"$BIN/xseg" info --segment "$SEG" --json --all | python3 -c "
import json,sys
print([p for p in json.load(sys.stdin)['port_list'] if p['port']==int(sys.argv[1])][0][sys.argv[2]])" "$1" "$2"
}

# dirty_pages FILE...: the files' pages dirty or under write-back in the
# page cache, not yet durable (cachestat(2), Linux 6.5); "none" where the
# kernel has no cachestat.
dirty_pages() {
	python3 - "$@" <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 451, "aarch64": 451}.get(os.uname().machine)
total = 0
for path in sys.argv[1:]:
    rng = (ctypes.c_uint64 * 2)(0, 0)   # offset 0, length 0: to the end
    cs = (ctypes.c_uint64 * 5)()        # cache, dirty, writeback, evicted, recently
    fd = os.open(path, os.O_RDONLY)
    if nr is None or libc.syscall(nr, fd, rng, cs, 0) != 0:
        print("none")
        sys.exit(0)
    os.close(fd)
    total += cs[1] + cs[2]
print(total)
EOF
}

# Waits until nobody owns port $1 (10 s at most): a killed peer's port
# is reaped by a live peer within about 100 ms; until then routing still
# sends there and what it queues is failed back (EHOSTDOWN).
wait_unbound() {
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\":$1,\"owner\":[1-9]" || return 0
		sleep 0.05
	done
	fail "port $1 is still owned"
}

# Waits until someone has bound port $1 (10 s at most).
wait_bound() {
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\":$1,\"owner\":[1-9]" && return 0
		sleep 0.05
	done
	fail "nobody bound port $1"
}

# expect_exit STATUS COMMAND...: runs it, output in $DIR/out and $DIR/err.
expect_exit() {
	local want=$1; shift
	"$@" > "$DIR/out" 2> "$DIR/err"; local rc=$?
	[ $rc -eq "$want" ] || { cat "$DIR/err"; fail "'$*' exited $rc, expected $want"; }
}

# bad_arg VALUE COMMAND...: COMMAND must exit 2 with exactly one line on
# stderr, and that line must name VALUE.
bad_arg() {
	local value=$1; shift
	expect_exit 2 timeout 20 "$@"
	[ "$(wc -l < "$DIR/err")" -eq 1 ] ||
		fail "'$*': expected one line on stderr, got: $(cat "$DIR/err")"
	grep -qF -- "$value" "$DIR/err" ||
		fail "'$*': stderr does not name '$value': $(cat "$DIR/err")"
}

# detached PIDFILE COMMAND...: runs COMMAND (a --daemon start writing
# PIDFILE) with stdout and stderr on a pipe, as `out=$(COMMAND 2>&1)` does;
# fails unless COMMAND exited 0 and the pipe ended within 20 s (a daemon
# holding it keeps such a caller waiting forever). The daemon joins pids.
detached() {
	local pidfile=$1; shift
	{ "$@" 2>&1; echo "exit $?"; } | { timeout 20 cat > "$DIR/dout"; echo $? > "$DIR/drc"; }
	[ -s "$pidfile" ] && pids+=($(cat "$pidfile"))
	[ "$(cat "$DIR/drc")" = 0 ] ||
		fail "'$*' kept its caller's stdout or stderr open: $(cat "$DIR/dout")"
	[ "$(tail -1 "$DIR/dout")" = "exit 0" ] || fail "'$*': $(cat "$DIR/dout")"
}

# strace_delay PID SYSCALL US: every SYSCALL of process PID (each of its
# threads) held US microseconds on entry from here until "$STRACE" is
# killed (strace then detaches and the call goes on). Returns once every
# thread is traced, and a half second more for strace to finish attaching;
# says SKIP and exits 0 where strace cannot attach.
strace_delay() {
	local pid=$1 call=$2 us=$3
	strace -qq -f -p "$pid" -e trace="$call" -e inject="$call":delay_enter="$us" \
		-o /dev/null 2> "$DIR/strace.log" &
	STRACE=$!
	pids+=($STRACE)
	local _traced=0
	for _ in $(seq 100); do
		_traced=1
		for s in /proc/"$pid"/task/*/status; do
			grep -q '^TracerPid:[[:space:]]*0$' "$s" && { _traced=0; break; }
		done
		[ $_traced = 1 ] && break
		sleep 0.05
	done
	[ $_traced = 1 ] || { echo "SKIP: strace cannot attach to $pid: $(cat "$DIR/strace.log")"; exit 0; }
	sleep 0.5
}
