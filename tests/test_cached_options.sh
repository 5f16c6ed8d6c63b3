#!/usr/bin/env bash
# cached's start from the outside: a bad argument (sizes that do not fit
# the bucket size, a segment that is not a name or does not exist, ports
# the segment does not have) exits 2 with one stderr line naming the
# value, also with --daemon; `out=$(cached --daemon ...)` returns once the
# daemon serves (it lets go of the caller's stdout and stderr), and the
# daemon is the port's owner; `cached --daemon --pidfile F`: the port is
# alive under the pid in F, `xseg plug` through it works, and SIGTERM to
# that pid writes the dirty data back, restores the route and exits 0.
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

echo "--- replication"
bad_arg "--mirror-marker: 'a b'" "${C[@]}" --cache-size 1M --mirror-port 5 --mirror-marker "a b"
bad_arg "--mirror-marker: ''" "${C[@]}" --cache-size 1M --mirror-port 5 --mirror-marker ""
bad_arg "--mirror-marker goes with --mirror-port" "${C[@]}" --cache-size 1M --mirror-marker m
bad_arg "--mirror-port and --replica" "${C[@]}" --cache-size 1M --mirror-port 5 --replica

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

echo "--- --daemon --pidfile F: plugged, written to, SIGTERM drains and exits 0"
timeout 20 "${C[@]}" --cache-size 1M --daemon --pidfile "$DIR/cached.pid" \
	--log-level info 2>> "$DIR/cached.log" || fail "cached --daemon exited $?"
dpid=$(cat "$DIR/cached.pid") || fail "no pidfile"
pids+=($dpid)
"$BIN/xseg" info --segment "$SEG" --json | grep -q "\"port\":3,\"owner\":$dpid,\"alive\":true" ||
	fail "port 3 is not the daemon's ($dpid): $("$BIN/xseg" info --segment "$SEG")"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "xseg plug through the daemon"
"$BIN/xreq" --segment "$SEG" --port 5 --target-port 1 --op write --target obj \
	--size 8192 --data daemon > /dev/null || fail "a write through the plugged daemon failed"
dirty=$(peer_stat 3 dirty_bytes)
[ "$dirty" -gt 0 ] || fail "the write left nothing dirty in the cache (write-back)"
kill -TERM "$dpid"
for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$dpid" 2>/dev/null && fail "the daemon did not stop on SIGTERM"
grep -q "stopped, exit status 0" "$DIR/cached.log" ||
	fail "the daemon did not stop with status 0 (or its log did not reach its file): $(cat "$DIR/cached.log")"
grep -q "routes straight to its blocker again" "$DIR/cached.log" ||
	fail "the drain did not restore the route: $(cat "$DIR/cached.log")"
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"next_hop":3' && fail "route left after SIGTERM"
out=$("$BIN/xreq" --segment "$SEG" --port 5 --target-port 1 --op read --target obj --size 6) ||
	fail "reading the drained write from filed failed: $out"
grep -q "data='daemon'" <<< "$out" || fail "the drained write did not reach filed: $out"

# --persist refusals (issue 22): one line, exit 2 for a file that is not
# cached's or was made for another geometry or blocker port, 1 for a file
# a live cached uses (and the runtime's line); none changes the file.
head -c 20000 /dev/urandom > "$DIR/junk.pf"
bad_arg "$DIR/junk.pf" "${C[@]}" --cache-size 1M --persist "$DIR/junk.pf"
bad_arg "--persist-sync: 'sometimes'" "${C[@]}" --cache-size 1M --persist "$DIR/p.pf" \
	--persist-sync sometimes
"${C[@]}" --cache-size 1M --persist "$DIR/p.pf" 2> "$DIR/persist.log" & ppid=$!
pids+=($ppid)
wait_bound 3
"$BIN/xseg" stats --segment "$SEG" --port 3 > /dev/null || fail "cached --persist does not serve"
expect_exit 1 timeout 20 "$BIN/cached" --segment "$SEG" --port 4 --blocker-port 1 \
	--cache-size 1M --persist "$DIR/p.pf"
# (the runtime adds its "initialization failed" to a start that fails 1)
head -1 "$DIR/err" | grep -q "p.pf' is in use by another cached (pid $ppid)" ||
	fail "a file in use: expected a line saying so, got: $(cat "$DIR/err")"
kill -TERM "$ppid"; wait "$ppid" || fail "cached --persist did not stop with status 0"
sum=$(md5sum < "$DIR/p.pf")
bad_arg "$DIR/p.pf" "${C[@]}" --cache-size 2M --persist "$DIR/p.pf"
bad_arg "blocker port 1, not 2" "$BIN/cached" --segment "$SEG" --port 3 --blocker-port 2 \
	--cache-size 1M --persist "$DIR/p.pf"
[ "$(md5sum < "$DIR/p.pf")" = "$sum" ] || fail "a refused start changed the persist file"
# The SIGTERM above wrote everything back: the file was closed clean.
"${C[@]}" --cache-size 1M --persist "$DIR/p.pf" --log-level info 2> "$DIR/persist2.log" & ppid=$!
pids+=($ppid)
wait_bound 3
"$BIN/xseg" stats --segment "$SEG" --port 3 --json | grep -q '"recoveries":0' ||
	fail "a clean file recovered something"
grep -q "p.pf' (closed clean): recovered 0 dirty bytes" "$DIR/persist2.log" ||
	fail "the file was not closed clean: $(grep persist "$DIR/persist2.log")"
kill -TERM "$ppid"; wait "$ppid" || fail "cached --persist did not stop with status 0"
echo "ok"
