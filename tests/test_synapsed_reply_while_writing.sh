#!/usr/bin/env bash
# A reply that comes back while the worker that sent its request is still in
# writev: the remote answers once the kernel has the bytes, before writev
# returns. synapsed A must neither read the reply into the request's buffer
# nor hand the buffer back to its client while the syscall may still read
# it: the reply is copied and its answer held until the writev returns
# (outbound.c, write_returned). Made to happen on every request with
# strace's syscall delay injection (writev returns 20 ms late), then:
# verified writes and reads, INFO and COPY (replies that carry data, which
# a direct read would put into the buffer being written), every byte read
# back through the link and straight from filed, and synapsed A's count of
# held answers above zero (else the path was never taken and the test
# proves nothing). Under TSan the old code was reported here (a reply's
# memcpy against the writev). Skipped without strace.
set -u
SEG_PREFIX=synapsed-rww
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 32M || fail "create A"
"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 256 --heap 32M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound_in "$SEGB" 1
PORT=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 1 \
	--allow 127.0.0.1 2> "$DIR/synapsed-b.log" & pids+=($!)
wait_bound_in "$SEGB" 2
# synapsed A with every writev 20 ms late (its workers write a request
# straight from the client's buffer when the link is idle); LeakSanitizer
# cannot run under ptrace, so an ASan build checks no leaks here
ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" strace -f -qq -o /dev/null -e trace=writev -e inject=writev:delay_exit=20000 \
	"$BIN/synapsed" --segment "$SEG" --port 2 --remote "127.0.0.1:$PORT" --timeout 30 \
	--log-level info 2> "$DIR/synapsed-a.log" & spid=$!
pids+=($spid)
wait_bound_in "$SEG" 2
wait_log "$DIR/synapsed-a.log" "connected to 127.0.0.1:$PORT"
apid=$(pgrep -P "$spid" -x synapsed) || fail "synapsed A is not running under strace"
pids+=($apid)

echo "--- verified data across the link, writev late"
bench_ok "$SEG" 10 2 --op write --pattern rand --total-size 1M --block-size 4K --iodepth 4 \
	--object-size 256K --seed 1
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size 1M --block-size 4K --iodepth 4 \
	--object-size 256K --seed 1
bench_ok "$SEG" 10 2 --op write --pattern seq --total-size 1M --block-size 64K --iodepth 2 \
	--object-size 256K --seed 2

echo "--- INFO and COPY: their replies carry data"
xa() { "$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --timeout 30 "$@"; }
xb() { "$BIN/xreq" --segment "$SEGB" --port 12 --target-port 1 "$@"; }
out=$(xa --op write --target obj-x --size 8K --data "late writev ") || fail "WRITE: $out"
for i in 1 2 3 4; do
	out=$(xa --op info --target obj-x) || fail "INFO $i: $out"
	[ "$out" = "$(xb --op info --target obj-x)" ] || fail "INFO $i over the link: '$out'"
	out=$(xa --op copy --target "obj-y$i" --src obj-x) || fail "COPY $i: $out"
	out=$(xa --op read --target "obj-y$i" --size 8K) || fail "READ of the copy $i: $out"
	[ "$out" = "$(xb --op read --target "obj-y$i" --size 8K)" ] ||
		fail "copy $i read through the link differs from filed's"
	echo "$out" | grep -q "data='late writev late writev " || fail "copy $i holds '$out'"
done

echo "--- every byte straight from filed"
bench_ok "$SEGB" 11 1 --op read --pattern seq --total-size 1M --block-size 64K --iodepth 2 \
	--object-size 256K --seed 2
bench_ok "$SEGB" 11 1 --op write --pattern rand --total-size 1M --block-size 4K --iodepth 4 \
	--object-size 256K --seed 3
bench_ok "$SEG" 10 2 --op read --pattern rand --total-size 1M --block-size 4K --iodepth 4 \
	--object-size 256K --seed 3

kill -TERM "$apid"
wait "$spid" || fail "synapsed A (under strace) exited non-zero on SIGTERM"
grep -E 'outbound: [0-9]+ answers came before the writev' "$DIR/synapsed-a.log" ||
	fail "synapsed A did not report its held answers at stop"
held=$(sed -nE 's/.*outbound: ([0-9]+) answers came before the writev.*/\1/p' "$DIR/synapsed-a.log")
[ "${held:-0}" -gt 0 ] || fail "no answer came while its request's writev was delayed: the path" \
	"under test was never taken"
echo "replies during the sending writev: held until it returned ($held), data intact: ok"
