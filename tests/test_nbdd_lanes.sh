#!/usr/bin/env bash
# nbdd --lanes (issue 24): each socket thread's commands leave from a lane
# of its own, so the peer behind (vlmcd --lanes 2) queues each socket
# thread's clients apart instead of every command on one ring. Two fio
# connections (one per socket thread) write 4K blocks at random with fio's
# verify headers, then read every block back and check it; both of
# vlmcd's lanes must have taken requests (with nbdd's commands all leaving
# from its first port, vlmcd's second lane took none). The socket threads
# poll (--socket-poll-us 200) between the clients' commands: the verified
# load runs through that path, and once the clients are done nbdd sleeps
# (a poll that never ended would burn a core per socket thread).
set -u
SEG_PREFIX=nbdd-lanes
. "$(dirname "$0")/lib.sh"
T="timeout 120"
for tool in fio python3; do
	command -v $tool > /dev/null || fail "$tool is missing: run tools/install-deps"
done

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 4 --lanes 2 --threads 2 --blocker-port 1 --volume vol:32M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 4
SOCK=$DIR/nbd.sock
"$BIN/nbdd" --segment "$SEG" --port 8 --lanes 2 --threads 2 --socket-threads 2 --target-port 4 \
	--socket-poll-us 200 --unix "$SOCK" --log-level info 2> "$DIR/nbdd.log" & pids+=($!)
wait_bound 8
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done

l4=$(port_info 4 submitted) l5=$(port_info 5 submitted)
fjob=(--ioengine=nbd --uri="nbd+unix:///vol?socket=$SOCK" --bs=4k --iodepth=16 --numjobs=2
      --size=8M --offset_increment=8M --verify=crc32c --verify_fatal=1 --group_reporting)
cd "$DIR" || fail "cd $DIR"   # fio's verify state files
$T fio --name=w --rw=randwrite --do_verify=0 "${fjob[@]}" > "$DIR/fio.w" 2>&1 ||
	{ tail -20 "$DIR/fio.w"; fail "fio randwrite"; }
$T fio --name=w --rw=randread "${fjob[@]}" > "$DIR/fio.r" 2>&1 ||
	{ tail -20 "$DIR/fio.r"; fail "fio randread with verify"; }
grep -q "err= 0" "$DIR/fio.w" && grep -q "err= 0" "$DIR/fio.r" || fail "fio counted errors"
grep -qE "read: IOPS=" "$DIR/fio.r" || { cat "$DIR/fio.r"; fail "fio verify read nothing"; }
grep -q "connected (socket thread 1)" "$DIR/nbdd.log" || fail "nbdd's second socket thread got no client"
d4=$(( $(port_info 4 submitted) - l4 )) d5=$(( $(port_info 5 submitted) - l5 ))
# each connection wrote and read 2048 blocks
[ "$d4" -ge 4096 ] || fail "vlmcd's lane 4 took $d4 requests, not one connection's 4096"
[ "$d5" -ge 4096 ] ||
	fail "vlmcd's lane 5 took $d5 requests: nbdd's socket threads did not leave from lanes of their own"
echo "vlmcd's lanes took $d4 and $d5 requests; every block read back verified"
waits=$(peer_stat 8 socket_waits) || fail "nbdd has no socket_waits figure"
echo "the socket threads waited $waits times in epoll_wait for events"
# Idle now: nbdd's CPU over a second (ticks of /proc/PID/stat), a few tries
# for a loaded machine; a socket thread still polling takes a whole second.
nbdd_pid=${pids[-1]} hz=$(getconf CLK_TCK) idle=
for _ in 1 2 3; do
	t0=$(awk '{ print $14 + $15 }' /proc/$nbdd_pid/stat); sleep 1
	t=$(( $(awk '{ print $14 + $15 }' /proc/$nbdd_pid/stat) - t0 ))
	[ $((t * 10)) -lt $((hz * 3)) ] && { idle=1; break; }
done
[ "$idle" ] || fail "idle nbdd with --socket-poll-us used $t of $hz ticks a second"
echo "nbdd --lanes: ok"
