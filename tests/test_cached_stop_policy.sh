#!/usr/bin/env bash
# A control command that turns write-back on again while cached stops: on
# SIGTERM cached writes every dirty byte back, restores the route and
# serves on (write-through) for up to 2 s while clients still send to its
# port. A `policy writeback` (or `plug`) then was answered: the writes
# after it went into the cache as dirty data, were acknowledged, and the
# stop (already past its write-back) dropped them and exited 0. A cache
# that is stopping must refuse both, and every acknowledged write must be
# on the blocker.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-stop-policy
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 --delay-us 1000 \
	2> "$DIR/filed.log" & fpid=$!; pids+=($fpid)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 512M \
	--write-policy writeback --dirty-high 95 --dirty-low 90 --log-level info \
	2> "$DIR/cached.log" & cpid=$!; pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

bench() {   # bench OP TARGET_PORT PREFIX SIZE OUT [more]
	"$BIN/bench-xseg" --segment "$SEG" --port "$((10 + ${#3}))" --target-port "$2" \
		--op "$1" --prefix "$3" --pattern seq --total-size "$4" --block-size 64K \
		--iodepth 8 --seed 5 --timeout 5 --json "${@:6}" > "$5" 2> "$5.err"
}
# a client that addresses cached's port itself keeps it busy through the stop
bench write 3 busy 16M "$DIR/busy.out" --runtime 30 --verify none & bpid=$!; pids+=($bpid)
sleep 1
kill -TERM "$cpid"
for _ in $(seq 1000); do
	grep -q "routes straight to its blocker again" "$DIR/cached.log" && break
	sleep 0.01
done
grep -q "routes straight to its blocker again" "$DIR/cached.log" || fail "cached did not restore the route"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback 2> "$DIR/policy.err"
prc=$?
echo "policy writeback during the stop: exit $prc $(cat "$DIR/policy.err")"
bench write 3 acked 32M "$DIR/w.out" --verify full --unacked "$DIR/unacked"
wait "$cpid"; crc=$?
kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null
echo "cached exited $crc; the writes after the policy command: requests $(json "$DIR/w.out" requests), failed $(json "$DIR/w.out" failed), unacked $(json "$DIR/w.out" unacked)"
bench read 1 acked 32M "$DIR/r.out" --verify full --may-differ "$DIR/unacked" || true
echo "read back from filed: corrupted $(json "$DIR/r.out" corrupted), failed $(json "$DIR/r.out" failed), differed $(json "$DIR/r.out" differed)"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ] ||
	fail "acknowledged writes are not on filed after cached's stop (exit $crc; policy writeback: exit $prc)"
[ "$prc" != 0 ] || fail "a stopping cached took 'policy writeback'"
grep -q "refused 'policy writeback'" "$DIR/cached.log" || fail "cached did not say why it refused"
echo "PASS"
