#!/usr/bin/env bash
# The xseg tool, nulld and ipc-bench from the outside: create, info (text
# and JSON), route set and clear, plug, destroy; bad arguments answered with
# exit 2 and one stderr line naming the value (nulld: also a segment that
# does not exist, ports it does not have); nulld answering an ipc-bench
# run and exiting 0 on SIGTERM, in the foreground and as a daemon (that
# returns inside $(...)).
# Run by tests/run-tests.sh (BIN = the build's bin directory).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=tools-xseg
. tests/lib.sh

for p in xseg nulld ipc-bench; do
	[ -x "$BIN/$p" ] || fail "$BIN/$p is missing"
done

# info_json EXPR: evaluates a Python expression over `xseg info --json`
# (as j, with port_list as a dict ports by number); prints the value.
info_json() {
	"$BIN/xseg" info --segment "$SEG" --json > "$DIR/info.json" ||
		fail "xseg info --json exited $?"
	python3 -m json.tool "$DIR/info.json" > /dev/null ||
		fail "xseg info --json is not valid JSON: $(cat "$DIR/info.json")"
	python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
ports = {p["port"]: p for p in j["port_list"]}
print(eval(sys.argv[2]))
' "$DIR/info.json" "$1"
}

# check_json EXPR: fails unless EXPR over `xseg info --json` is True.
check_json() {
	[ "$(info_json "$1")" = True ] || fail "xseg info --json: not ($1): $(cat "$DIR/info.json")"
}

# wait_gone PID SECONDS: fails unless PID exits within SECONDS; its exit
# status is left in $gone_rc (only for our children).
wait_gone() {
	local pid=$1 limit=$2
	for _ in $(seq $((limit * 20))); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$pid" 2>/dev/null && fail "pid $pid still runs $limit s after SIGTERM"
	gone_rc=0
	wait "$pid" 2>/dev/null || gone_rc=$?
}

echo "--- help"
expect_exit 0 "$BIN/xseg" --help
grep -q "xseg create" "$DIR/out" || fail "xseg --help does not list create"
expect_exit 0 "$BIN/xseg" help create
grep -q -- "--ports" "$DIR/out" || fail "xseg help create does not mention --ports"
expect_exit 0 "$BIN/xseg" route --help
grep -q -- "--clear" "$DIR/out" || fail "xseg route --help does not mention --clear"
expect_exit 2 "$BIN/xseg"
for p in nulld ipc-bench; do
	expect_exit 0 "$BIN/$p" --help
	grep -q -- "--segment" "$DIR/out" || fail "$p --help does not mention --segment"
done

echo "--- create, info"
expect_exit 0 "$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 4M
expect_exit 1 "$BIN/xseg" create --segment "$SEG"
[ -s "$DIR/err" ] || fail "creating an existing segment printed no reason"
expect_exit 0 "$BIN/xseg" info --segment "$SEG"
grep -q "requests: 256 of 256 free" "$DIR/out" || fail "info: $(cat "$DIR/out")"
check_json 'j["ports"] == 16 and j["requests"] == 256 and j["free_requests"] == 256 and j["reserved_requests"] == 0'
check_json 'j["heap_size"] == 4 << 20 and j["heap_used"] == 0 and j["port_list"] == []'
check_json 'len(j["port_list"]) == 0'
"$BIN/xseg" info --segment "$SEG" --json --all > "$DIR/all.json" || fail "info --all"
python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))["port_list"]) == 16' \
	"$DIR/all.json" || fail "info --all does not list all 16 ports"
expect_exit 1 "$BIN/xseg" info --segment "$SEG-nonexistent"

echo "--- route set and clear"
expect_exit 0 "$BIN/xseg" route --segment "$SEG" --port 3 --next 4
check_json 'ports[3]["next_hop"] == 4 and ports[3]["owner"] == 0'
expect_exit 0 "$BIN/xseg" info --segment "$SEG"
grep -Eq '^ +3 +0 +- +4 ' "$DIR/out" || fail "info does not show 3 -> 4: $(cat "$DIR/out")"
expect_exit 1 "$BIN/xseg" route --segment "$SEG" --port 4 --next 3   # a cycle
check_json '4 not in ports'
expect_exit 0 "$BIN/xseg" route --segment "$SEG" --port 3 --clear
check_json 'j["port_list"] == []'

echo "--- bad arguments: exit 2, one line naming the value"
bad_arg "'0x'" "$BIN/xseg" create --segment "$SEG-x" --ports 0x
bad_arg "'0'" "$BIN/xseg" create --segment "$SEG-x" --ports 0
bad_arg "'12Q'" "$BIN/xseg" create --segment "$SEG-x" --heap 12Q
bad_arg "'999'" "$BIN/xseg" create --segment "$SEG-x" --mode 999
bad_arg "port 99" "$BIN/xseg" route --segment "$SEG" --port 99 --next 1
bad_arg "port 16" "$BIN/xseg" route --segment "$SEG" --port 1 --next 16
bad_arg "'abc'" "$BIN/xseg" route --segment "$SEG" --port 1 --next abc
bad_arg "--clear" "$BIN/xseg" route --segment "$SEG" --port 1 --next 2 --clear
bad_arg "--bogus" "$BIN/xseg" info --segment "$SEG" --bogus
bad_arg "frobnicate" "$BIN/xseg" frobnicate --segment "$SEG"
bad_arg "stray" "$BIN/xseg" info --segment "$SEG" stray
bad_arg "--segment" "$BIN/xseg" info
bad_arg "'x1'" "$BIN/nulld" --segment "$SEG" --port x1
bad_arg "'0'" "$BIN/nulld" --segment "$SEG" --port 1 --threads 0
bad_arg "'loud'" "$BIN/nulld" --segment "$SEG" --port 1 --log-level loud
bad_arg "--pidfile" "$BIN/nulld" --segment "$SEG" --port 1 --pidfile ""
bad_arg "--forward 1" "$BIN/nulld" --segment "$SEG" --port 1 --forward 1
bad_arg "'99999'" "$BIN/nulld" --segment "$SEG" --port 1 --forward 99999
bad_arg "'a/b'" "$BIN/nulld" --segment a/b --port 1
bad_arg "'$SEG-none'" "$BIN/nulld" --segment "$SEG-none" --port 1
bad_arg "'$SEG-none'" "$BIN/nulld" --segment "$SEG-none" --port 1 --daemon --pidfile "$DIR/none.pid"
bad_arg "--port 16" "$BIN/nulld" --segment "$SEG" --port 16
bad_arg "--forward 16" "$BIN/nulld" --segment "$SEG" --port 1 --forward 16
bad_arg "'1K'" "$BIN/nulld" --segment "$SEG" --port 1 --copy 1K
bad_arg "--copy and --forward" "$BIN/nulld" --segment "$SEG" --port 1 --copy 1M --forward 2
bad_arg "'0'" "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --iodepth 0
bad_arg "'99999'" "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --iodepth 99999
bad_arg "'-1'" "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --seconds -1
bad_arg "15..16" "$BIN/ipc-bench" --segment "$SEG" --port 15 --target-port 1 --threads 2
bad_arg "--target-port" "$BIN/ipc-bench" --segment "$SEG" --port 2
check_json 'j["port_list"] == []'    # nothing above touched the segment

echo "--- nulld answers ipc-bench, exits 0 on SIGTERM"
"$BIN/nulld" --segment "$SEG" --port 1 --log-level debug 2> "$DIR/nulld.log" &
npid=$!; pids+=($npid)
wait_bound 1
check_json 'ports[1]["owner"] == '"$npid"' and ports[1]["alive"] is True'
expect_exit 0 "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 \
	--iodepth 8 --threads 2 --requests 5000 --json
tail -n 1 "$DIR/out" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
assert r["requests"] == 5000 and r["failed"] == 0 and r["rps"] > 0, r
assert r["threads"] == 2 and r["iodepth"] == 8, r
assert 0 < r["lat_us_p50"] <= r["lat_us_p99"] <= r["lat_us_p999"] <= r["lat_us_max"], r
' || fail "ipc-bench --json: $(tail -n 1 "$DIR/out")"
expect_exit 0 "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --seconds 0.2
# fewer requests than threads x depth: the unsent ones go back to the pool
expect_exit 0 "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 \
	--requests 3 --threads 2 --iodepth 8
check_json 'ports[1]["submitted"] >= 5000 and j["free_requests"] == 256'
check_json '2 not in ports and 3 not in ports'   # the client left its ports
# plug through a live peer: nulld serves the control call, the route is set
expect_exit 0 "$BIN/xseg" plug --segment "$SEG" --port 5 --via 1
check_json 'ports[5]["next_hop"] == 1'
expect_exit 0 "$BIN/xseg" route --segment "$SEG" --port 5 --clear
# a second nulld may not take a live owner's port
expect_exit 1 "$BIN/nulld" --segment "$SEG" --port 1

echo "--- nulld --forward: one more hop, replies passed back"
"$BIN/nulld" --segment "$SEG" --port 4 --forward 1 2> "$DIR/fwd.log" &
fpid=$!; pids+=($fpid)
wait_bound 4
before=$(info_json 'ports[1]["submitted"]')
expect_exit 0 "$BIN/ipc-bench" --segment "$SEG" --port 6 --target-port 4 \
	--iodepth 16 --requests 3000 --json
tail -n 1 "$DIR/out" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
assert r["requests"] == 3000 and r["failed"] == 0, r
' || fail "ipc-bench through the forwarder: $(tail -n 1 "$DIR/out")"
# every request went on to port 1 (nulld answering), none answered by the forwarder
check_json 'ports[1]["submitted"] == '"$before"' + 3000 and ports[4]["submitted"] == 3000'
# xseg plug/unplug ask the forwarder, which holds nothing: both succeed
expect_exit 0 "$BIN/xseg" plug --segment "$SEG" --port 5 --via 4
expect_exit 0 "$BIN/xseg" unplug --segment "$SEG" --via 4
check_json '5 not in ports'
kill -TERM "$fpid"
wait_gone "$fpid" 5
[ "$gone_rc" -eq 0 ] || fail "nulld --forward exited $gone_rc on SIGTERM"
# forwarding to a port nobody serves fails the requests back, no hang
"$BIN/nulld" --segment "$SEG" --port 4 --forward 9 2> "$DIR/fwd.log" &
fpid=$!; pids+=($fpid)
wait_bound 4
expect_exit 1 timeout 20 "$BIN/ipc-bench" --segment "$SEG" --port 6 --target-port 4 --requests 10
grep -q "cannot forward request .* to port 9" "$DIR/fwd.log" ||
	fail "the forwarder did not say why: $(cat "$DIR/fwd.log")"
kill -TERM "$fpid"
wait_gone "$fpid" 5
kill -TERM "$npid"
wait_gone "$npid" 5
[ "$gone_rc" -eq 0 ] || fail "nulld exited $gone_rc on SIGTERM"
check_json '1 not in ports'

echo "--- nulld --daemon --pidfile"
# as in $(... 2>&1): the daemon lets go of stdout and stderr once it serves
detached "$DIR/nulld.pid" "$BIN/nulld" --segment "$SEG" --port 1 --daemon --pidfile "$DIR/nulld.pid"
dpid=$(cat "$DIR/nulld.pid") || fail "no pidfile"
check_json 'ports[1]["owner"] == '"$dpid"
expect_exit 0 "$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 --requests 2000
kill -TERM "$dpid"
wait_gone "$dpid" 5
[ -e "$DIR/nulld.pid" ] && fail "the daemon left its pidfile"
check_json '1 not in ports'

echo "--- nulld --copy: reads and writes answered whole, moving their bytes"
"$BIN/nulld" --segment "$SEG" --port 1 --copy 1M 2> "$DIR/copy.log" & cpid=$!
pids+=($cpid)
wait_bound 1
for op in write read; do
	expect_exit 0 "$BIN/bench-xseg" --segment "$SEG" --port 2 --target-port 1 --op $op \
		--pattern rand --total-size 2M --block-size 64K --iodepth 4 --json
	grep -q '"failed":0' "$DIR/out" || fail "nulld --copy, $op: $(tail -n 1 "$DIR/out")"
done
kill -TERM "$cpid"
wait_gone "$cpid" 5
[ "$gone_rc" -eq 0 ] || fail "nulld --copy exited $gone_rc on SIGTERM: $(cat "$DIR/copy.log")"

echo "--- destroy"
expect_exit 0 "$BIN/xseg" destroy --segment "$SEG"
expect_exit 1 "$BIN/xseg" info --segment "$SEG"
expect_exit 1 "$BIN/xseg" destroy --segment "$SEG"
echo "ok"
