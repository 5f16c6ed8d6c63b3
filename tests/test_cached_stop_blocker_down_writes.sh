#!/usr/bin/env bash
# cached stops (SIGTERM) with nothing dirty and its blocker down: it said
# so and stopped at once, but left write-back on. A write taken between
# that check and the workers' end went into the cache as dirty data and
# was acknowledged; the stop, believing itself clean, cleared the port's
# dirty mark, dropped the data and exited 0. The window is microseconds;
# here cached's stderr is a pipe that fills up at that very log line
# ("nothing dirty and blocker port 1 is down"), holding cached there while
# a client writes. Every acknowledged write must be on the blocker (or
# cached must not exit clean).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-stop-down
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
mkfifo "$DIR/err.fifo"
cat "$DIR/err.fifo" > "$DIR/cached.log" & catpid=$!; pids+=($catpid)
# port 1 (the blocker) has nobody on it: down
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writeback --log-level info 2> "$DIR/err.fifo" & cpid=$!; pids+=($cpid)
wait_bound 3
sleep 0.3
kill -STOP "$catpid"
sleep 0.1
# Leave room in the pipe for the signal's line, not for the next one.
python3 - "$DIR/err.fifo" "$cpid" <<'PY' || fail "filling the pipe"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 4096)
line1 = len("2026-11-27 01:38:29.520 cached[%s] INFO: signal 15: stopping\n" % sys.argv[2])
os.write(fd, b"#" * (4096 - line1 - 8) + b"\n")
PY
kill -TERM "$cpid"
sleep 0.5
kill -0 "$cpid" 2>/dev/null || fail "cached did not wait at its log line (the test's window)"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 3 --op write --prefix late \
	--pattern seq --total-size 4M --block-size 64K --iodepth 8 --seed 3 --timeout 2 \
	--json --verify full --unacked "$DIR/unacked" > "$DIR/w.out" 2> "$DIR/w.err"
kill -CONT "$catpid"
wait "$cpid"; crc=$?
echo "cached exited $crc; writes during its stop: requests $(json "$DIR/w.out" requests), failed $(json "$DIR/w.out" failed), unacked $(json "$DIR/w.out" unacked)"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --prefix late \
	--pattern seq --total-size 4M --block-size 64K --iodepth 8 --seed 3 --timeout 5 \
	--json --verify full --may-differ "$DIR/unacked" > "$DIR/r.out" 2> "$DIR/r.err" || true
echo "read back from filed: corrupted $(json "$DIR/r.out" corrupted), failed $(json "$DIR/r.out" failed), differed $(json "$DIR/r.out" differed)"
[ "$crc" != 0 ] || { [ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ]; } ||
	fail "cached exited 0 while acknowledged writes are not on filed"
echo "PASS"
