#!/usr/bin/env bash
# A broken client can send filed nothing but requests it refuses (hidden
# names here): one warning a second, saying how many more were refused,
# not a line each (10240 such requests wrote 10240 lines in a fraction of
# a second, as they did in sosd). filed keeps serving the others.
set -u
SEG_PREFIX=filed-refusals
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 32M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --prefix .hidden --op write \
	--pattern seq --block-size 4K --total-size 40M --iodepth 32 --json > "$DIR/b.out" 2>&1
[ "$(json "$DIR/b.out" failed)" = 10240 ] || fail "not every hidden name was refused: $(tail -1 "$DIR/b.out")"
lines=$(grep -c "refused object name" "$DIR/filed.log")
echo "10240 refused requests, $lines warning lines"
[ "$lines" -ge 1 ] && [ "$lines" -le 10 ] ||
	fail "10240 refused requests wrote $lines warnings (one a second expected)"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern rand \
	--block-size 4K --total-size 4M --iodepth 16 --verify full --json > "$DIR/w.out" 2>&1 ||
	fail "writes after the refusals: $(tail -1 "$DIR/w.out")"
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op read --pattern rand \
	--block-size 4K --total-size 4M --iodepth 16 --verify full --json > "$DIR/r.out" 2>&1 ||
	fail "reads after the refusals: $(tail -1 "$DIR/r.out")"
echo "ok"
