#!/usr/bin/env bash
# A READ request frame that carries data (data_len > 0): synapsed B took a
# request with a buffer of the READ's size (the reply's room) and copied
# the frame's data_len bytes into it, past its end, over segment B's heap:
# any --allow'ed client could crash B and every peer of its segment (filed
# and synapsed B died). Now such a frame is answered EINVAL. Verified data
# straight to filed on segment B before and after, synapsed B alive, and
# the refusal logged.
set -u
SEG_PREFIX=synapsed-rdata
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"

"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 256 --heap 16M || fail "create B"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
fpid=$!
pids+=($fpid)
wait_bound_in "$SEGB" 1
PORT=$(free_port)
"$BIN/synapsed" --segment "$SEGB" --port 2 --listen "127.0.0.1:$PORT" --target-port 1 \
	--allow 127.0.0.1 --log-level info 2> "$DIR/synapsed-b.log" & bpid=$!
pids+=($bpid)
wait_bound_in "$SEGB" 2

echo "--- verified data before"
bench_ok "$SEGB" 10 1 --op write --pattern seq --total-size 4M --block-size 64K --iodepth 8 \
	--object-size 1M --seed 1

echo "--- READ frames (size 4096) carrying 4 MiB of data each"
# kind 1 (request), op 1 (X_READ), id, target_len 4, data_len 4 MiB
raw_frames 127.0.0.1 "$PORT" 1:1:7:4:4194304 1:1:8:4:4194304 > "$DIR/raw.out"
sleep 0.5
kill -0 "$bpid" 2>/dev/null || fail "synapsed B died after a READ frame with data"
kill -0 "$fpid" 2>/dev/null || fail "filed died after a READ frame with data reached synapsed B"
grep -q "data of 4194304 bytes for a READ of size 4096: EINVAL" "$DIR/synapsed-b.log" ||
	fail "the READ frame with data was not refused (log above)"

echo "--- verified data after: segment B's heap intact"
bench_ok "$SEGB" 10 1 --op read --pattern seq --total-size 4M --block-size 64K --iodepth 8 \
	--object-size 1M --seed 1
bench_ok "$SEGB" 10 1 --op write --pattern rand --total-size 4M --block-size 4K --iodepth 16 \
	--object-size 1M --seed 2
bench_ok "$SEGB" 10 1 --op read --pattern rand --total-size 4M --block-size 4K --iodepth 16 \
	--object-size 1M --seed 2
kill -0 "$bpid" 2>/dev/null || fail "synapsed B died"
echo "a READ frame with data is refused, segment B unharmed: ok"
