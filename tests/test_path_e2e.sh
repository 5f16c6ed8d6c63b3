#!/usr/bin/env bash
# The request path without a cache: bench-xseg -> vlmcd -> filed, and the
# tools around it. Verified writes and reads (seq and rand, blocks crossing
# object boundaries), bad input answered FAILED while the peers keep
# serving, the xseg tool's errors, and SIGTERM to filed under load.
set -u
SEG_PREFIX=path-e2e
. "$(dirname "$0")/lib.sh"

echo "--- xseg tool: arguments"
expect_exit 2 "$BIN/xseg"
expect_exit 0 "$BIN/xseg" --help
expect_exit 2 "$BIN/xseg" frobnicate --segment x
expect_exit 2 "$BIN/xseg" create --segment "$SEG" --ports 0x
grep -q "'0x'" "$DIR/err" || fail "bad --ports value not named"
[ "$(wc -l < "$DIR/err")" -eq 1 ] || fail "more than one line for a bad argument"
expect_exit 2 "$BIN/xseg" create --segment "$SEG" --heap lots
expect_exit 1 "$BIN/xseg" info --segment "no-such-segment-$$"
expect_exit 0 "$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M
expect_exit 1 "$BIN/xseg" create --segment "$SEG"
[ "$(stat -c %a /dev/shm/"$SEG")" = 600 ] || fail "segment not created 0600"
expect_exit 2 "$BIN/xseg" route --segment "$SEG" --port 99 --next 1
grep -q "99" "$DIR/err" || fail "bad port not named"
expect_exit 0 "$BIN/xseg" route --segment "$SEG" --port 5 --next 6
expect_exit 1 "$BIN/xseg" route --segment "$SEG" --port 6 --next 5   # a cycle
"$BIN/xseg" info --segment "$SEG" --json | python3 -m json.tool > /dev/null || fail "info --json is not JSON"
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":5,.*"next_hop":6' || fail "route not shown"
expect_exit 0 "$BIN/xseg" route --segment "$SEG" --port 5 --clear
for prog in filed vlmcd cached nulld bench-xseg; do
	expect_exit 0 "$BIN/$prog" --help
	expect_exit 2 "$BIN/$prog" --no-such-option
done

echo "--- filed and vlmcd: verified data across object boundaries"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" & fpid=$!
pids+=($fpid)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:6M --volume other:1M \
	--object-size 64K 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2
bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol \
		--verify full --timeout 30 --json "$@" > "$DIR/bench.out" 2> "$DIR/bench.err" ||
		{ cat "$DIR/bench.err"; fail "bench-xseg $*"; }
	tail -1 "$DIR/bench.out" | grep -q '"failed":0,"corrupted":0' || fail "bench-xseg $* counted failures"
}
# 24K blocks in 64K objects: every third request crosses a boundary
bench --op write --pattern seq --total-size 6M --block-size 24K --iodepth 8 --seed 1
bench --op read --pattern rand --total-size 6M --block-size 24K --iodepth 8 --seed 1
bench --op write --pattern rand --total-size 6M --block-size 48K --iodepth 16 --seed 2
bench --op read --pattern seq --total-size 6M --block-size 8K --iodepth 4 --seed 2
[ -f "$DIR/data/vol_0000000000000000" ] && [ -f "$DIR/data/vol_000000000000005f" ] ||
	fail "objects not named <volume>_<16 hex digits>"

echo "--- bad input: answered FAILED, peers keep serving"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume nosuch --op read \
	--pattern seq --total-size 4K --block-size 4K 2> "$DIR/err" >/dev/null && fail "unknown volume served"
grep -q "No such file" "$DIR/err" || fail "unknown volume: error not reported"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume other --op write \
	--pattern seq --total-size 2M --block-size 64K 2> "$DIR/err" >/dev/null && fail "write past the volume's end served"
grep -q "Invalid argument" "$DIR/err" || fail "past-the-end: error not reported"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix ../escape --op write \
	--pattern seq --total-size 4K --block-size 4K 2> "$DIR/err" >/dev/null && fail "name with '/' served"
[ -e "$DIR/escape-1-0" ] && fail "filed wrote outside --dir"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 7 --op read --pattern seq \
	--total-size 4K --block-size 4K 2> "$DIR/err" >/dev/null && fail "unbound target port served"
grep -q "nobody has bound port 7" "$DIR/err" || fail "unbound port: error not reported"
bench --op read --pattern seq --total-size 6M --block-size 64K --iodepth 4 --seed 2   # still serving

echo "--- SIGTERM to filed under load"
( sleep 0.3; kill -TERM "$fpid" ) &
"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 1 --op write --pattern seq \
	--total-size 512M --block-size 4K --iodepth 1 --seed 3 --timeout 5 \
	> "$DIR/term.out" 2> "$DIR/term.err"
rc=$?
wait "$fpid"; frc=$?
[ $frc -eq 0 ] || fail "filed exited $frc on SIGTERM"
[ $rc -ne 0 ] || fail "bench-xseg did not report the lost blocker"
# acknowledged data survives a restart
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
bench --op read --pattern seq --total-size 6M --block-size 64K --iodepth 4 --seed 2
echo "path end to end: ok"
