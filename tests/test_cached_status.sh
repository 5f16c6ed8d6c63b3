#!/usr/bin/env bash
# What `systemctl status` shows for cached (STATUS=, through the notify
# socket that tests/support/notify_listener.py plays): "serving on ..."
# once ready; a state the operator must act on while it lasts. It said
# "serving" whatever happened after READY=1.
#  - write-back, 4M dirty in cached alone, filed SIGKILLed: "DEGRADED:
#    write-backs to port 1 fail ..."; filed back: "serving" again, and
#    every acknowledged byte reads back from filed once cached is stopped;
#  - --persist, 2M dirty in the file, cached SIGKILLed and started again
#    with filed down: "waiting for object 'cached-persist-...' on port 1";
#    filed back: "serving", every byte read back.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-status
. tests/lib.sh

sock=$DIR/notify.sock
python3 tests/support/notify_listener.py "$sock" "$BIN/xseg" "$SEG" > "$DIR/notify.log" \
	2> "$DIR/listen.log" & pids+=($!)
for _ in $(seq 100); do [ -e "$sock.ready" ] && break; sleep 0.05; done
[ -e "$sock.ready" ] || fail "the python3 listener did not start: $(cat "$DIR/listen.log")"

# wait_status PID TEXT: waits (10 s) until the last STATUS= from PID holds TEXT
wait_status() {
	local last
	for _ in $(seq 200); do
		last=$(grep "^pid=$1 .*STATUS=" "$DIR/notify.log" | tail -1)
		[[ $last =~ STATUS=.*$2 ]] && { echo "$last"; return 0; }
		sleep 0.05
	done
	echo "cached $1's messages:"; grep "^pid=$1 " "$DIR/notify.log"
	fail "the last STATUS= from cached does not hold '$2' after 10 s"
}
start_filed() {
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2>> "$DIR/filed.log" & fpid=$!
	pids+=($fpid)
	wait_bound 1
}
start_cached() {   # [options]: its pid in $cpid
	NOTIFY_SOCKET=$sock "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 \
		--cache-size 64M --write-policy writeback --dirty-high 100 --dirty-low 90 "$@" \
		2>> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
}
bench() {   # OP SEED TARGET_PORT SIZE
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$3" --op "$1" --prefix s \
		--pattern rand --total-size "$4" --block-size 64K --iodepth 8 --seed "$2" \
		--verify full --timeout 30 --json > "$DIR/$1$2.out" 2> "$DIR/$1$2.err"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
start_filed

echo "--- write-backs failing: DEGRADED, then serving again"
start_cached
wait_status "$cpid" "serving on segment '$SEG', port 3-3"
bench write 1 3 4M || fail "writes into cached: $(tail -1 "$DIR/write1.out")"
[ "$(peer_stat 3 dirty_bytes)" = $((4 << 20)) ] || fail "the data is not dirty in cached alone"
kill -KILL "$fpid"; wait "$fpid" 2> /dev/null
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough > /dev/null 2>&1 &   # a write-back now
ppid=$!
wait_status "$cpid" "DEGRADED: write-backs to port 1 fail"
start_filed
wait $ppid
# the switch failed with filed down; cached, write-through now, writes the
# 4M back once filed is back, with no other command (it waited for the
# next FLUSH or stop, DEGRADED and "retrying every 1 ms" the while)
wait_status "$cpid" "serving on segment"
[ "$(peer_stat 3 dirty_bytes)" = 0 ] || fail "cached still holds $(peer_stat 3 dirty_bytes) dirty bytes"
kill -TERM "$cpid"; wait "$cpid" || fail "cached's stop exited $?"
bench read 1 1 4M || fail "what cached acknowledged is not on filed: $(tail -1 "$DIR/read1.out")"

echo "--- the start's persist check waiting for a blocker that is down"
start_cached --persist "$DIR/c.pf" --persist-sync flush
wait_bound 3
bench write 2 3 2M || fail "writes into the file: $(tail -1 "$DIR/write2.out")"
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 3 --op flush > /dev/null || fail "FLUSH"
[ "$(peer_stat 3 dirty_bytes)" = $((2 << 20)) ] || fail "the data is not dirty in cached alone"
kill -KILL "$cpid" "$fpid"; wait "$cpid" "$fpid" 2> /dev/null
start_cached --persist "$DIR/c.pf" --persist-sync flush
wait_status "$cpid" "waiting for object 'cached-persist-[0-9a-f]*' on port 1 before serving the 2097152 bytes"
start_filed
wait_status "$cpid" "serving on segment"
bench read 2 3 2M || fail "the file's data through cached: $(tail -1 "$DIR/read2.out")"
kill -TERM "$cpid"; wait "$cpid" || fail "cached's stop exited $?"
bench read 2 1 2M || fail "the file's data on filed: $(tail -1 "$DIR/read2.out")"
echo "every acknowledged byte read back; STATUS= followed each state"
echo "PASS"
