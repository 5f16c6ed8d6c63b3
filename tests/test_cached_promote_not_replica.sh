#!/usr/bin/env bash
# `xseg promote` sent to a cache that is not a replica (a wrong port in a
# failover: the primary's, or any plain cache's) answered "promoted;
# everything it held is on its blocker": the operator believed the replica
# promoted while it still held its data as a replica. A cache started
# without --replica must refuse; a replica may be promoted again (a retry
# after a timeout). This replica was never reset by a primary (it knows no
# marker): a plain promote is refused, --force promotes it.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-promote-plain
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 8M \
	--write-policy writeback --log-level info 2> "$DIR/cached.log" & c3=$!; pids+=($c3)
"$BIN/cached" --segment "$SEG" --port 4 --blocker-port 1 --cache-size 8M --replica \
	--log-level info 2> "$DIR/replica.log" & c4=$!; pids+=($c4)
wait_bound 3; wait_bound 4
"$BIN/xseg" promote --segment "$SEG" --port 3 > "$DIR/p.out" 2> "$DIR/p.err"
rc=$?
echo "promote of a plain cache: exit $rc: $(cat "$DIR/p.out" "$DIR/p.err")"
[ $rc != 0 ] || fail "a cache that is no replica answered 'promoted'"
grep -q "promoted" "$DIR/p.out" && fail "said promoted"
"$BIN/xseg" promote --segment "$SEG" --port 4 2> "$DIR/p4.err" &&
	fail "a replica no primary reset (it knows no marker) was promoted without --force"
grep -q "knows no primary's marker" "$DIR/p4.err" || fail "the refusal does not say why: $(cat "$DIR/p4.err")"
"$BIN/xseg" promote --segment "$SEG" --port 4 --force || fail "promote --force of the replica"
"$BIN/xseg" promote --segment "$SEG" --port 4 || fail "promote of the replica again"
grep -q "refused 'promote'" "$DIR/cached.log" || fail "cached did not say why it refused"
# the caches first: each writes back to filed as it stops
kill -TERM "$c3" "$c4"
wait "$c3" || fail "cached exit status"
wait "$c4" || fail "the promoted replica's exit status"
echo "PASS"
