#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd against a real single-node Ceph (tools/micro-ceph): its arguments,
# start failures (no cluster: within seconds, conf and monitors named; no
# pool), the blocker conformance suite, that sosd sleeps when idle and while
# waiting on a down OSD, and an OSD outage: requests fail with ETIMEDOUT
# after --op-timeout while sosd stays up, then succeed again with every
# acknowledged byte intact.
set -u
SEG_PREFIX=sosd
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"
OP_TIMEOUT=6

echo "--- arguments"
expect_exit 0 "$BIN/sosd" --help
expect_exit 2 "$BIN/sosd" --no-such-option
expect_exit 2 "$BIN/sosd" --segment "$SEG" --port 1 --conf /dev/null
grep -q -- "--pool" "$DIR/err" || fail "missing --pool not named"
expect_exit 2 "$BIN/sosd" --segment "$SEG" --port 1 --pool p --conf "$DIR/no-such.conf"
grep -q "no-such.conf" "$DIR/err" || fail "missing conf file not named"
expect_exit 2 "$BIN/sosd" --segment "$SEG" --port 1 --pool p --conf /dev/null --op-timeout 5s
grep -q "'5s'" "$DIR/err" || fail "bad --op-timeout not named"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for a bad argument"
# librados reads a directory as "No such file or directory"
bad_arg "is a directory" "$BIN/sosd" --segment "$SEG" --port 1 --pool p --conf "$DIR"

expect_exit 0 "$MICRO_CEPH" --help
expect_exit 2 "$MICRO_CEPH" frobnicate "$CEPH_DIR"
grep -q "frobnicate" "$DIR/err" && [ "$(wc -l < "$DIR/err")" -eq 1 ] ||
	fail "micro-ceph: a bad action is not named in one line"

ceph_start
"$BIN/xseg" create --segment "$SEG" --ports 256 --requests 1024 --heap 128M || fail "xseg create"

echo "--- no cluster: fails within seconds, naming the conf and the monitors"
dead_port=3399
while (exec 3<>/dev/tcp/127.0.0.1/$dead_port) 2>/dev/null; do dead_port=$((dead_port + 1)); done
sed "s/127.0.0.1:[0-9]*/127.0.0.1:$dead_port/g" "$CONF" > "$DIR/dead.conf"
start=$SECONDS
expect_exit 1 "$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$DIR/dead.conf" \
	--connect-timeout 3
[ $((SECONDS - start)) -le 10 ] || fail "giving up on an absent cluster took $((SECONDS - start)) s"
grep -q "dead.conf" "$DIR/err" && grep -q "127.0.0.1:$dead_port" "$DIR/err" ||
	{ cat "$DIR/err"; fail "the error does not name the conf file and the monitor"; }
expect_exit 1 "$BIN/sosd" --segment "$SEG" --port 1 --pool no-such-pool --conf "$CONF"
grep -q "no-such-pool" "$DIR/err" || fail "a missing pool is not named"
# a client that needs a key and has none: fails at once, naming the keyring
sed -e 's/^auth client required = none/auth client required = cephx/' \
	-e "s|^keyring = .*|keyring = $DIR/no-such.keyring|" "$CONF" > "$DIR/nokey.conf"
expect_exit 1 "$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$DIR/nokey.conf"
grep -q "no-such.keyring" "$DIR/err" ||
	{ cat "$DIR/err"; fail "a missing keyring is not named"; }

echo "--- the blocker conformance suite on sosd"
# Four workers: a FLUSH must still wait for writes another worker accepted.
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 4 \
	--op-timeout $OP_TIMEOUT 2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
"$BIN/../tests/test_blocker_conformance" --segment "$SEG" --port 1 --strict-flush ||
	fail "conformance suite on sosd"

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix "sosd-$$" \
		--pattern rand --block-size 64K --iodepth 16 --verify full --json "$@"
}

echo "--- a client of refused names: a warning a second, not a line each"
sleep 1.1   # past the second of the conformance suite's own refusal (it would hold the first line)
before=$(grep -c "refused" "$DIR/sosd.log")
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix .hidden --op write \
	--pattern seq --block-size 4K --total-size 40M --iodepth 32 --json > "$DIR/b.out" 2>&1
[ "$(json "$DIR/b.out" failed)" = 10240 ] || fail "not every hidden name was refused"
lines=$(( $(grep -c "refused" "$DIR/sosd.log") - before ))
[ $lines -ge 1 ] && [ $lines -le 10 ] ||
	fail "10240 refused requests wrote $lines warnings (one a second expected)"

# CPU seconds sosd used (user + system), in clock ticks.
sosd_ticks() { awk '{print $14 + $15}' "/proc/$spid/stat"; }
hz=$(getconf CLK_TCK)

echo "--- idle: sosd sleeps when nothing is in flight"
t0=$(sosd_ticks); sleep 2; t1=$(sosd_ticks)
[ $((t1 - t0)) -le $((hz / 5)) ] || fail "idle sosd used $((t1 - t0)) ticks of CPU in 2 s"

echo "--- OSD down: requests fail with ETIMEDOUT after --op-timeout, sosd stays up"
bench --op write --total-size 16M --seed 5 --timeout 30 > "$DIR/b.out" 2> "$DIR/b.err" ||
	{ cat "$DIR/b.err"; fail "write before the outage"; }
"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop"
start=$SECONDS t0=$(sosd_ticks)
bench --op read --total-size 256K --seed 5 --timeout 60 > "$DIR/b.out" 2> "$DIR/b.err" &&
	fail "reads served with the OSD down"
took=$((SECONDS - start)) t1=$(sosd_ticks)
# Nothing completes for seconds: sosd must sleep while librados waits, not
# spin on the requests it has in flight.
[ $((t1 - t0)) -le $((took * hz / 2)) ] ||
	fail "sosd used $((t1 - t0)) ticks of CPU in $took s of waiting on a down OSD"
grep -q "Connection timed out" "$DIR/b.err" || { cat "$DIR/b.err"; fail "no ETIMEDOUT reported"; }
[ $took -ge $((OP_TIMEOUT - 1)) ] && [ $took -le $((OP_TIMEOUT + 10)) ] ||
	fail "requests failed after $took s with --op-timeout $OP_TIMEOUT"
kill -0 $spid || fail "sosd died during the outage"
"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start"
bench --op read --total-size 16M --seed 5 --timeout 60 > "$DIR/b.out" 2> "$DIR/b.err" ||
	{ cat "$DIR/b.err"; fail "reads after the OSD came back"; }
tail -1 "$DIR/b.out" | grep -q '"failed":0,"corrupted":0' || fail "data changed across the outage"

echo "--- OSD restarted under load: writes wait (a long --op-timeout), none is lost"
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 2 \
	--op-timeout 120 2>> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
bench --op write --total-size 64M --block-size 4K --seed 6 --timeout 150 \
	> "$DIR/load.out" 2> "$DIR/load.err" & bpid=$!
sleep 0.5
kill -0 $bpid || fail "the writer ended before the outage began"
"$MICRO_CEPH" osd-stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-stop under load"
"$MICRO_CEPH" osd-start "$CEPH_DIR" 2>> "$DIR/micro-ceph.log" || fail "osd-start under load"
wait $bpid || { cat "$DIR/load.err"; fail "writes across the restart failed"; }
grep -q '"requests":16384,"failed":0' "$DIR/load.out" || fail "not every write was answered"
tail -1 "$DIR/load.out"
bench --op read --total-size 64M --block-size 4K --seed 6 --timeout 60 \
	> "$DIR/b.out" 2> "$DIR/b.err" || { cat "$DIR/b.err"; fail "acknowledged writes lost"; }

echo "--- SIGTERM: sosd exits 0"
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"

"$MICRO_CEPH" stop "$CEPH_DIR" 2>> "$DIR/micro-ceph.log"
ceph_gone || fail "Ceph daemons left running after stop"
echo "sosd: all checks passed"
