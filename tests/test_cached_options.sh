#!/usr/bin/env bash
# cached's start from the outside: a bad argument (sizes that do not fit
# the bucket size, a segment that is not a name or does not exist, ports
# the segment does not have) exits 2 with one stderr line naming the
# value, also with --daemon; `out=$(cached --daemon ...)` returns once the
# daemon serves (it lets go of the caller's stdout and stderr), and the
# daemon is the port's owner.
set -u
SEG_PREFIX=cached-opts
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 256 --heap 16M || fail "create"
C=("$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1)

echo "--- sizes"
bad_arg "--cache-size: '1000001'" "${C[@]}" --cache-size 1000001
bad_arg "--cache-size: '6K'" "${C[@]}" --cache-size 6K --bucket-size 4K
bad_arg "--object-size: '96K'" "${C[@]}" --cache-size 1M --bucket-size 64K --object-size 96K
bad_arg "--object-size: '6K'" "${C[@]}" --cache-size 1M --object-size 6K
bad_arg "--bucket-size: '3000'" "${C[@]}" --cache-size 1M --bucket-size 3000
bad_arg "--max-request-size: '1K'" "${C[@]}" --cache-size 1M --max-request-size 1K
bad_arg "--dirty-low 80" "${C[@]}" --cache-size 1M --dirty-low 80

echo "--- segment and ports"
bad_arg "'a/b'" "$BIN/cached" --segment a/b --port 3 --blocker-port 1 --cache-size 1M
bad_arg "'$SEG-none'" "$BIN/cached" --segment "$SEG-none" --port 3 --blocker-port 1 --cache-size 1M
bad_arg "'$SEG-none'" "$BIN/cached" --segment "$SEG-none" --port 3 --blocker-port 1 \
	--cache-size 1M --daemon --pidfile "$DIR/none.pid"
[ -e "$DIR/none.pid" ] && fail "a daemon that did not start left its pidfile"
bad_arg "--port 9" "$BIN/cached" --segment "$SEG" --port 9 --blocker-port 1 --cache-size 1M
bad_arg "--blocker-port 8" "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 8 --cache-size 1M
bad_arg "both 3" "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 3 --cache-size 1M
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port_list":\[\]' ||
	fail "a refused start left a port bound: $("$BIN/xseg" info --segment "$SEG")"

echo "--- --daemon inside \$(...)"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
detached "$DIR/cached.pid" "${C[@]}" --cache-size 1M --daemon --pidfile "$DIR/cached.pid"
dpid=$(cat "$DIR/cached.pid") || fail "no pidfile"
# the daemon, not the process that returned, owns the port
"$BIN/xseg" info --segment "$SEG" --json | grep -q "\"port\":3,\"owner\":$dpid,\"alive\":true" ||
	fail "port 3 is not the daemon's ($dpid): $("$BIN/xseg" info --segment "$SEG")"
"$BIN/xseg" stats --segment "$SEG" --port 3 > /dev/null || fail "the daemon does not answer stats"
kill -TERM "$dpid"
for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$dpid" 2>/dev/null && fail "the daemon did not stop on SIGTERM"
[ -e "$DIR/cached.pid" ] && fail "the daemon left its pidfile"

echo "--- --daemon logs to a file it was given"
timeout 20 "${C[@]}" --cache-size 1M --daemon --pidfile "$DIR/cached.pid" \
	--log-level info 2>> "$DIR/cached.log" || fail "cached --daemon exited $?"
dpid=$(cat "$DIR/cached.pid") || fail "no pidfile"
pids+=($dpid)
kill -TERM "$dpid"
for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$dpid" 2>/dev/null && fail "the daemon did not stop on SIGTERM"
grep -q "stopped" "$DIR/cached.log" || fail "the daemon's log did not reach its file: $(cat "$DIR/cached.log")"
echo "ok"
