#!/usr/bin/env bash
# What nbdd lets a local user or a bad client take: its --unix socket file
# is 0600 whatever the umask (it took the umask: 0777 at umask 000, every
# local user could read and write every export), --socket-mode widens it;
# clients that send READs and never read the replies are closed with a
# line once they hold --max-client-buffer and their socket takes nothing
# for 1 s (counted, the count logged at exit), and nbdd's VmRSS stays bounded
# (two such clients took it to 285 MB), per client and under
# --max-buffer-total, while a well-behaved client (a raw one, then
# qemu-io) is served all along. The path: nbdd -> vlmcd -> filed.
set -u
SEG_PREFIX=nbdd-limits
. "$(dirname "$0")/lib.sh"
T="timeout 120"
RAW="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_raw_client.py"
for tool in qemu-io python3; do
	command -v $tool > /dev/null || fail "$tool is missing: run tools/install-deps"
done

echo "--- arguments"
expect_exit 0 "$BIN/nbdd" --help
for opt in --socket-mode --max-client-buffer --max-buffer-total; do
	grep -q -- "$opt" "$DIR/out" || fail "--help does not show $opt"
done
for bad in 01000 0778 8 rw -1 '' 0x1ff 0o600 ' 600'; do
	expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M \
		--unix "$DIR/s" --socket-mode "$bad"
	grep -qF -- "--socket-mode: '$bad'" "$DIR/err" || { cat "$DIR/err"; fail "bad --socket-mode '$bad' not named"; }
	[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for --socket-mode '$bad'"
done
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M --unix "$DIR/s" \
	--max-client-buffer 1x
grep -q "'1x'" "$DIR/err" || fail "bad --max-client-buffer not named"
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M --unix "$DIR/s" \
	--max-client-buffer 64M --max-buffer-total 32M
grep -q "max-buffer-total: '32M'" "$DIR/err" || { cat "$DIR/err"; fail "--max-buffer-total below the client's not named"; }
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for --max-buffer-total"

echo "--- the path: nbdd -> vlmcd -> filed"
# 256M of heap: three clients' 32M of replies in flight are held twice in
# the segment (nbdd's chunk and vlmcd's request to filed); with 128M, vlmcd
# could find no buffer while the non-readers held the rest, the path
# stalled and the good client's write failed ENOMEM after nbdd's 10 s of
# retries (CI, once)
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 256M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2

# start_nbdd PORT NAME OPTIONS...: nbdd on xseg port PORT serving $DIR/NAME.sock,
# logging to $DIR/NAME.log, under the umask $UMASK (022); its pid in $nbdd_pid
start_nbdd() {
	local port=$1 name=$2; shift 2
	rm -f "$DIR/$name.sock"
	( umask "${UMASK:-022}"; exec "$BIN/nbdd" --segment "$SEG" --port "$port" --target-port 2 \
		--volume vol:64M --unix "$DIR/$name.sock" "$@" 2> "$DIR/$name.log" ) & nbdd_pid=$!
	pids+=($nbdd_pid)
	wait_bound "$port"
	for _ in $(seq 100); do [ -S "$DIR/$name.sock" ] && return 0; sleep 0.05; done
	fail "nbdd $name: no socket $DIR/$name.sock"
}
stop_nbdd() {
	kill -TERM $nbdd_pid; wait $nbdd_pid || fail "nbdd $1 exited $? on SIGTERM"
}

echo "--- the socket is 0600 under umask 000; --socket-mode widens it, whatever the umask"
# check_mode NAME WANT UMASK OPTIONS...
check_mode() {
	local name=$1 want=$2 mode
	UMASK=$3 start_nbdd 4 "$name" "${@:4}"
	mode=$(stat -c %a "$DIR/$name.sock")
	[ "$mode" = "$want" ] || fail "socket made under umask $3 with '${*:4}' has mode $mode, not $want"
	qemu-io -f raw "nbd+unix:///vol?socket=$DIR/$name.sock" -c "read 0 4096" > "$DIR/qio.out" 2>&1 ||
		{ cat "$DIR/qio.out"; fail "nbdd's own user cannot use the $want socket"; }
	stop_nbdd "$name"
}
check_mode mode0 600 000
check_mode mode660 660 000 --socket-mode 0660
check_mode mode644 644 077 --socket-mode 644
check_mode mode0x 600 022 --socket-mode 600

# bounds(RSS ANON): the memory bounds, in MB, for a plain build; under
# the sanitizers (their shadow memory) only what is closed is checked
bounds() { [ -n "${SANITIZE:-}" ] || echo "--rss-mb $1 --anon-mb $2"; }

echo "--- clients not reading their replies, defaults (32M each), 3 on Unix, 2 on TCP: closed, VmRSS bounded"
TCP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_nbdd 4 mem --listen "127.0.0.1:$TCP"
# VmRSS: 3 x 32M held, the segment's pages nbdd touches (at most its 128M
# heap) and slack; the old nbdd held 128M of malloc's per client (3 x 128M:
# 450 MB of VmRSS)
$T $RAW "$DIR/mem.sock" non-readers --clients 3 $(bounds 256 128) --pid $nbdd_pid \
	--log "$DIR/mem.log" || fail "raw client: non-readers"
$T $RAW "127.0.0.1:$TCP" non-readers --clients 2 $(bounds 256 128) --pid $nbdd_pid \
	--log "$DIR/mem.log" || fail "raw client over TCP: non-readers"
qemu-io -f raw "nbd+unix:///vol?socket=$DIR/mem.sock" -c "write -P 0x61 0 1M" \
	-c "read -P 0x61 0 1M" > "$DIR/qio.out" 2>&1 && ! grep -qiE "fail|error" "$DIR/qio.out" ||
	{ cat "$DIR/qio.out"; fail "qemu-io after the non-readers"; }
stop_nbdd mem
grep -q "closed holding replies they did not read (--max-client-buffer): 5" "$DIR/mem.log" ||
	fail "the count of such closes is not in the log at exit"

# malloc's part: 24M held, not 3 x 16M
echo "--- the same with --max-client-buffer 16M --max-buffer-total 24M: the total holds"
start_nbdd 5 total --max-client-buffer 16M --max-buffer-total 24M --socket-threads 3
$T $RAW "$DIR/total.sock" non-readers --clients 3 $(bounds 168 36) --pid $nbdd_pid \
	--log "$DIR/total.log" || fail "raw client: non-readers under --max-buffer-total"
grep -q "past --max-buffer-total" "$DIR/total.log" || fail "waiting for the total not logged"
qemu-io -f raw "nbd+unix:///vol?socket=$DIR/total.sock" -c "read -P 0x61 0 1M" \
	> "$DIR/qio.out" 2>&1 && ! grep -qiE "fail|error" "$DIR/qio.out" ||
	{ cat "$DIR/qio.out"; fail "qemu-io after the non-readers (total)"; }
stop_nbdd total
grep -l Sanitizer "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo ok
