#!/usr/bin/env bash
# nbdd with clients nobody here wrote: nbdd -> vlmcd -> cached -> filed,
# driven by qemu-io (patterns at aligned and unaligned offsets, verified),
# qemu-img convert (an image in and back out, identical bytes), nbdcopy,
# nbdinfo and fio's nbd engine (4K randwrite then randread, fio's verify),
# plus a raw socket sending what real clients do not (garbage, truncated
# and bad requests, clients leaving mid-flight or stalling mid-message,
# floods, more connections than nbdd may open files): those connections
# close or stop being read, errors are the spec's, nbdd's CPU, memory and
# open files stay bounded, and the server keeps serving the others. The
# raw client also checks what real clients do not show: FUA on disk when
# answered, zeros over written bytes, replies out of order.
set -u
SEG_PREFIX=nbdd-e2e
. "$(dirname "$0")/lib.sh"
# Every client runs under a limit: a hang fails here, with the peers' logs.
T="timeout 120"
RAW="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_raw_client.py"
SCALE=${XSEG_STRESS_SCALE:-1}
scaled() { python3 -c "print(max($2, int($1 * $SCALE)))"; }

for tool in qemu-io qemu-img nbdcopy nbdinfo fio python3; do
	command -v $tool > /dev/null || fail "$tool is missing: run tools/install-deps"
done

echo "--- arguments"
expect_exit 0 "$BIN/nbdd" --help
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port x --volume v:1M --unix "$DIR/s"
grep -q "'x'" "$DIR/err" || fail "bad --target-port not named"
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:lots --unix "$DIR/s"
grep -q "'lots'" "$DIR/err" || fail "bad volume size not named"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for a bad argument"
# --listen: port digits in 1..65535, a numeric address (IPv6 in brackets);
# 127.0.0.1:99999 used to bind port 34463 (99999 mod 65536)
for bad in nocolon 127.0.0.1:99999 127.0.0.1:0 127.0.0.1:x 127.0.0.1: 127.0.0.1:+80 \
	   1.2.3:80 localhost:80 ::1:80 '[1.2.3.4]:80' :80 '[::1]:80x'; do
	expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M \
		--listen "$bad"
	grep -qF "'$bad'" "$DIR/err" || { cat "$DIR/err"; fail "bad --listen '$bad' not named"; }
	[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for --listen '$bad'"
done
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M --unix "$DIR/s" \
	--io-timeout 1s
grep -q "'1s'" "$DIR/err" || fail "bad --io-timeout not named"
expect_exit 2 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M --unix "$DIR/s" \
	--max-connections 0
grep -q "'0'" "$DIR/err" || fail "bad --max-connections not named"
for bad in 0 65 two; do
	bad_arg "$bad" "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M \
		--unix "$DIR/s" --socket-threads "$bad"
done
for bad in 1001 -1 5us; do
	bad_arg "$bad" "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M \
		--unix "$DIR/s" --socket-poll-us "$bad"
done
for bad in 0 3601 5s; do
	bad_arg "$bad" "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume v:1M \
		--unix "$DIR/s" --retry-limit "$bad"
done

echo "--- the path: nbdd -> vlmcd -> cached -> filed"
# Pool and heap sized for nbdcopy's 4 connections x 64 requests on every hop.
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 4096 --heap 512M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M \
	2> "$DIR/cached.log" & pids+=($!)
wait_bound 3
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:64M --volume small:1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
TCP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
SOCK=$DIR/nbd.sock
# two socket threads: clients are handed from the first to the second
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --volume vol:64M --volume small:1M \
	--unix "$SOCK" --listen "127.0.0.1:$TCP" --socket-threads 2 --log-level info \
	2> "$DIR/nbdd.log" & nbdd_pid=$!
pids+=($nbdd_pid)
wait_bound 4
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
URI="nbd+unix:///vol?socket=$SOCK"
# threads named for top -H and perf: the runtime's workers, the socket threads
for _ in $(seq 100); do
	names=" $(cat /proc/$nbdd_pid/task/*/comm | sort | tr '\n' ' ')"
	[[ "$names" == *" nbdd-sock1 "* && "$names" == *" nbdd-w1 "* ]] && break
	sleep 0.02
done
for want in nbdd nbdd-sock0 nbdd-sock1 nbdd-w0 nbdd-w1; do
	[[ "$names" == *" $want "* ]] || fail "no thread of nbdd is named $want:$names"
done
nfds() { ls "/proc/$1/fd" | wc -l; }
fd0=$(nfds $nbdd_pid)   # nbdd's own files: every connection's fd must go again
# wait_fds PID N WHEN: waits until PID is back to N files open (10 s at most)
wait_fds() {
	local n
	for _ in $(seq 200); do
		n=$(nfds $1); [ "$n" -eq "$2" ] && return 0
		sleep 0.05
	done
	ls -l "/proc/$1/fd"; fail "$3: nbdd has $n files open, $2 with no client"
}

echo "--- nbdinfo"
$T nbdinfo "$URI" > "$DIR/info" 2>&1 || { cat "$DIR/info"; fail "nbdinfo"; }
grep -q "export-size: 67108864" "$DIR/info" || fail "nbdinfo: wrong size"
for f in can_flush can_fua can_trim can_zero can_multi_conn; do
	grep -q "$f: true" "$DIR/info" || fail "nbdinfo: $f not offered"
done
grep -q "block_size_maximum: 33554432" "$DIR/info" || fail "nbdinfo: block size not announced"
$T nbdinfo --list "nbd://127.0.0.1:$TCP" > "$DIR/list" 2>&1 || fail "$T nbdinfo --list over TCP"
grep -q 'export="vol"' "$DIR/list" && grep -q 'export="small"' "$DIR/list" ||
	fail "$T nbdinfo --list does not show both exports"

echo "--- FUA: a WRITE with it is in filed's files when answered"
# first: cached holds no dirty data yet, so none is written back meanwhile
$T $RAW "$SOCK" fua --data "$DIR/data" || fail "raw client: fua"

echo "--- qemu-io: patterns at aligned and unaligned offsets"
qio() { $T qemu-io -f raw "$@" > "$DIR/qio.out" 2>&1 || { cat "$DIR/qio.out"; fail "qemu-io $*"; }
	! grep -qiE "fail|error" "$DIR/qio.out" || { cat "$DIR/qio.out"; fail "qemu-io reported a failure"; }; }
writes=() reads=()
lens=(4096 512 12345 65553 1048579 1 4097 131072)
for i in $(seq 0 29); do
	off=$(( i * 2097152 + (i * 4099) % 1048576 ))
	len=${lens[$((i % ${#lens[@]}))]}
	pat=$(( i * 7 % 254 + 1 ))
	writes+=(-c "write -P $pat $off $len")
	reads+=(-c "read -P $pat $off $len")
done
qio "$URI" "${writes[@]}" -c flush
qio "$URI" "${reads[@]}"
qio "nbd://127.0.0.1:$TCP/vol" "${reads[@]}"      # the same bytes over TCP
# zeros over bytes written first (a range never written reads as zeros
# anyway), unaligned and aligned; the bytes around them stay; qemu rounds
# an unaligned discard to 4K (the raw client trims unaligned ranges)
qio "$URI" -c "write -P 0x33 4000 110000" -c "write -z 4097 100000" -c "read -P 0 4097 100000" \
	-c "read -P 0x33 4000 97" -c "read -P 0x33 104097 9903" \
	-c "write -P 0x44 1048576 65536" -c "write -z 1052672 8192" -c "read -P 0 1052672 8192" \
	-c "read -P 0x44 1048576 4096" -c "read -P 0x44 1060864 53248" \
	-c "write -P 0x11 2097152 8192" -c "discard 2097152 8192" -c "read -P 0 2097152 8192" \
	-c "write -f -P 0x22 3000000 5000" -c "read -P 0x22 3000000 5000"

echo "--- qemu-img convert in and out"
mb=$(scaled 24 8)
head -c $((mb << 20)) /dev/urandom > "$DIR/img.raw"
dd if=/dev/zero of="$DIR/img.raw" bs=1M seek=2 count=2 conv=notrunc status=none   # a zero run
$T qemu-img convert -n -f raw -O raw "$DIR/img.raw" "$URI" 2> "$DIR/err" || { cat "$DIR/err"; fail "convert in"; }
$T qemu-img convert -f raw -O raw "$URI" "$DIR/out.raw" 2> "$DIR/err" || { cat "$DIR/err"; fail "convert out"; }
cmp -n $((mb << 20)) "$DIR/img.raw" "$DIR/out.raw" || fail "qemu-img: bytes differ after a round trip"
[ "$(stat -c %s "$DIR/out.raw")" = 67108864 ] || fail "qemu-img: wrong size out"

echo "--- nbdcopy"
$T nbdcopy "$URI" "$DIR/copy.raw" || fail "nbdcopy out"
cmp "$DIR/out.raw" "$DIR/copy.raw" || fail "nbdcopy out differs from qemu-img's"
head -c 1048576 /dev/urandom > "$DIR/small.raw"
$T nbdcopy "$DIR/small.raw" "nbd+unix:///small?socket=$SOCK" || fail "nbdcopy in"
$T nbdcopy -C 2 "nbd://127.0.0.1:$TCP/small" "$DIR/small.back" || fail "nbdcopy back over TCP"
cmp "$DIR/small.raw" "$DIR/small.back" || fail "nbdcopy: bytes differ"

echo "--- raw socket: bad clients are closed, good ones keep being served"
wait_fds $nbdd_pid $fd0 "after the real clients"
for case in garbage-handshake bad-option-magic huge-option unknown-export abort \
	    bad-request-magic errors out-of-order batched-replies zeroes leave-in-flight \
	    flow-control leave-paused disc-then-bytes handshake-flood; do
	$T $RAW "$SOCK" $case --pid $nbdd_pid || fail "raw client: $case"
done
for case in abort batched-replies leave-in-flight leave-paused; do   # the same over TCP
	$T $RAW "127.0.0.1:$TCP" $case --pid $nbdd_pid || fail "raw client over TCP: $case"
done
wait_fds $nbdd_pid $fd0 "after the raw clients left"

# --io-timeout 1: stalled mid-message or taking no replies, the server
# closes; idle between requests, not. --max-connections 2: a third client
# waits until one closes.
echo "--- nbdd --io-timeout 1 --max-connections 2"
# three socket threads: the limit counts the connections of all of them
"$BIN/nbdd" --segment "$SEG" --port 6 --target-port 2 --volume vol:64M --io-timeout 1 \
	--max-connections 2 --socket-threads 3 --unix "$DIR/short.sock" 2> "$DIR/nbdd-short.log" &
short_pid=$!
pids+=($short_pid)
wait_bound 6
for _ in $(seq 100); do [ -S "$DIR/short.sock" ] && break; sleep 0.05; done
short_fds=$(nfds $short_pid)
for case in truncated-request truncated-payload stalled-handshake unread-replies max-connections; do
	$T $RAW "$DIR/short.sock" $case --log "$DIR/nbdd-short.log" || fail "raw client: $case"
done
wait_fds $short_pid $short_fds "after the stalled clients"
kill -TERM $short_pid; wait $short_pid || fail "nbdd with --io-timeout 1 exited $?"

echo "--- at the open files limit: nbdd rests its listeners, then serves again"
# An nbdd of its own that never sends to the path: at the limit libxseg
# cannot open /proc/PID/stat and takes the destination port's owner (vlmcd)
# for dead, reaping its port.
"$BIN/nbdd" --segment "$SEG" --port 5 --target-port 2 --volume vol:64M \
	--unix "$DIR/limit.sock" 2> "$DIR/nbdd-limit.log" & limit_pid=$!
pids+=($limit_pid)
wait_bound 5
for _ in $(seq 100); do [ -S "$DIR/limit.sock" ] && break; sleep 0.05; done
limit_fds=$(nfds $limit_pid)
prlimit --pid $limit_pid --nofile=$((limit_fds + 4)): || fail "prlimit"   # soft limit
$T $RAW "$DIR/limit.sock" at-fd-limit --pid $limit_pid --log "$DIR/nbdd-limit.log" ||
	fail "raw client: at-fd-limit"
wait_fds $limit_pid $limit_fds "after the connections at the open files limit"
kill -TERM $limit_pid; wait $limit_pid || fail "nbdd at the open files limit exited $?"
qio "$URI" "${reads[@]:26}"   # slots past what convert and the raw clients wrote
kill -0 $nbdd_pid || fail "nbdd died"

echo "--- fio nbd engine: 4K randwrite then randread with fio's verify, iodepth 16, two connections"
fmb=$(scaled 16 4)
fjob=(--ioengine=nbd --uri="$URI" --bs=4k --iodepth=16 --numjobs=2 --size=${fmb}M
      --offset_increment=${fmb}M --verify=crc32c --verify_fatal=1 --group_reporting)
# in $DIR: fio leaves its verify state files in the current directory
cd "$DIR" || fail "cd $DIR"
$T fio --name=w --rw=randwrite --do_verify=0 "${fjob[@]}" > "$DIR/fio.w" 2>&1 ||
	{ tail -20 "$DIR/fio.w"; fail "fio randwrite"; }
# fio 3.33 verifies every block a read-only job reads when --verify is set
# (header magic, offset, crc32c): a plain randread job over the same range
$T fio --name=w --rw=randread "${fjob[@]}" > "$DIR/fio.r" 2>&1 ||
	{ tail -20 "$DIR/fio.r"; fail "fio randread with verify"; }
grep -q "err= 0" "$DIR/fio.w" && grep -q "err= 0" "$DIR/fio.r" || fail "fio counted errors"
grep -q "connected (socket thread 1)" "$DIR/nbdd.log" || fail "nbdd's second socket thread got no client"
grep -qE "read: IOPS=" "$DIR/fio.r" || { cat "$DIR/fio.r"; fail "fio verify read nothing"; }
# ... and that verification is live: 16 bytes changed inside one block
# the second job wrote make the same randread fail
qio "$URI" -c "write -P 0x5a $(( (fmb << 20) + 131072 + 3000 )) 16"
$T fio --name=w --rw=randread "${fjob[@]}" > "$DIR/fio.bad" 2>&1 &&
	{ tail -20 "$DIR/fio.bad"; fail "fio's verify missed 16 changed bytes"; }
grep -q "verify failed" "$DIR/fio.bad" || { tail -20 "$DIR/fio.bad"; fail "fio failed, not on verify"; }
cd - > /dev/null || fail "cd back"

echo "--- leaving clients left nothing behind"
pool_full() {   # waits until every request is back in the pool (or a peer's reserve)
	local missing
	for _ in $(seq 100); do
		missing=$("$BIN/xseg" info --segment "$SEG" --json | python3 -c 'import json,sys
j = json.load(sys.stdin); print(j["requests"] - j["free_requests"] - j["reserved_requests"])')
		[ "$missing" = 0 ] && return 0
		sleep 0.1
	done
	fail "$1: $missing requests not back in the pool"
}
pool_full "after the clients left"

echo "--- SIGTERM with a client writing: exit 0, nothing left behind"
sent0=$(peer_stat 4 sent)
( cd "$DIR" && $T fio --name=busy --ioengine=nbd --uri="$URI" --rw=randwrite --bs=64k \
	--iodepth=16 --size=32M --time_based --runtime=30 > "$DIR/fio.busy" 2>&1 ) & busy=$!
# until fio's writes go through nbdd (64 requests sent on; 20 s at most)
until=$((SECONDS + 20))
while [ $SECONDS -lt $until ]; do
	[ "$(peer_stat 4 sent)" -ge $((sent0 + 64)) ] && break
	kill -0 $busy 2>/dev/null || break
	sleep 0.1
done
kill -0 $busy 2>/dev/null || { cat "$DIR/fio.busy"; fail "fio did not start"; }
[ "$(peer_stat 4 sent)" -ge $((sent0 + 64)) ] || fail "fio's writes did not reach nbdd in 20 s"
kill -TERM $nbdd_pid
wait $nbdd_pid; rc=$?
[ $rc -eq 0 ] || fail "nbdd exited $rc on SIGTERM"
[ -e "$SOCK" ] && fail "unix socket left behind"
wait $busy && fail "fio went on without its server"
pool_full "after nbdd stopped under load"
echo ok
