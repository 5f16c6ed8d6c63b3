#!/usr/bin/env bash
# nbdd's stop closes a TCP connection only once the client has every reply
# nbdd wrote (or --stop-timeout passed): a client that reads slowly has a
# READ's reply still in nbdd's send queue when the stop finds the
# connection drained; it then sends one more command and reads. A close
# with that command unread resets the connection, and the reset drops what
# the client had not yet received (the old nbdd: the READ's 1M cut short,
# "reset"). Now nbdd shuts its side down after the replies, drops what
# comes in, and closes once the send queue is empty: the client reads the
# whole reply, then the end of the stream.
set -u
SEG_PREFIX=nbdd-linger
. "$(dirname "$0")/lib.sh"

SIZE=$((1 << 20))
PORTNUM=$((20000 + $$ % 20000))
CLIENT="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_linger_client.py"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M \
	2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 2
start_nbdd() {   # options...: its pid in $npid, its log nbdd.log
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --listen "127.0.0.1:$PORTNUM" \
		--log-level info "$@" 2> "$DIR/nbdd.log" & npid=$!
	pids+=($npid)
	wait_bound 4
	for _ in $(seq 100); do
		python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORTNUM), 1).close()" \
			2>/dev/null && break
		sleep 0.05
	done
}
start_nbdd --stop-timeout 10

timeout 60 $CLIENT "127.0.0.1:$PORTNUM" --size $SIZE --go "$DIR/go" --sent "$DIR/sent" \
	> "$DIR/client.json" 2> "$DIR/client.log" & cpid=$!
for _ in $(seq 200); do [ -e "$DIR/sent" ] && break; sleep 0.05; done
[ -e "$DIR/sent" ] || fail "the client sent nothing: $(cat "$DIR/client.log")"
# nbdd has answered the READ once in_flight is 0; its reply waits in the
# socket's send queue (the client's window is 16K)
for _ in $(seq 200); do [ "$(peer_stat 4 in_flight)" = 0 ] && break; sleep 0.05; done
sleep 0.3
kill -TERM $npid
for _ in $(seq 100); do grep -q "closed:" "$DIR/nbdd.log" && break; sleep 0.05; done
grep "closed:" "$DIR/nbdd.log" | head -2
sleep 0.2
touch "$DIR/go"
wait $cpid || fail "the client failed: $(cat "$DIR/client.log")"
out=$(cat "$DIR/client.json")
echo "client: $out"
for _ in $(seq 150); do kill -0 $npid 2>/dev/null || break; sleep 0.1; done
kill -0 $npid 2>/dev/null && fail "nbdd still runs 15 s after SIGTERM"
wait $npid; rc=$?
echo "nbdd exited $rc"
whole() {   # JSON: the client got the whole reply, then the end of the stream
	python3 -c 'import json, sys; d = json.loads(sys.argv[1])
sys.exit(0 if d["end"] == "eof" and d["received"] >= d["wanted"] else 1)' "$1"
}
whole "$out" || fail "the client lost replies nbdd wrote: $out"
[ $rc = 0 ] || fail "nbdd exited $rc"

echo "--- one client that reads nothing does not hold up another on its socket thread"
# (a first version waited for each connection in turn on the socket thread:
# the other's 16M reply was cut at --stop-timeout, nbdd exited 1)
start_nbdd --socket-threads 1 --stop-timeout 4
rm -f "$DIR/sentA" "$DIR/sentB" "$DIR/go"
timeout 60 $CLIENT "127.0.0.1:$PORTNUM" --mode stuck --hold 20 --size $SIZE --sent "$DIR/sentA" \
	2> "$DIR/clientA.log" & apid=$!
timeout 60 $CLIENT "127.0.0.1:$PORTNUM" --mode steady --size $((16 << 20)) --sent "$DIR/sentB" \
	--go "$DIR/go" > "$DIR/clientB.json" 2> "$DIR/clientB.log" & bpid=$!
for _ in $(seq 200); do [ -e "$DIR/sentA" ] && [ -e "$DIR/sentB" ] && break; sleep 0.05; done
for _ in $(seq 200); do [ "$(peer_stat 4 in_flight)" = 0 ] && break; sleep 0.05; done
sleep 0.5
kill -TERM $npid
touch "$DIR/go"
wait $bpid || fail "client B failed: $(cat "$DIR/clientB.log")"
for _ in $(seq 150); do kill -0 $npid 2>/dev/null || break; sleep 0.1; done
kill -0 $npid 2>/dev/null && fail "nbdd still runs 15 s after SIGTERM"
wait $npid; rc=$?
kill $apid 2>/dev/null; wait $apid 2>/dev/null
out=$(cat "$DIR/clientB.json")
echo "the reading client: $out; nbdd exited $rc"
grep "not yet received" "$DIR/nbdd.log" || true
whole "$out" || fail "the reading client lost replies nbdd wrote: $out"
[ $rc = 0 ] || fail "nbdd exited $rc"
echo "PASS"
