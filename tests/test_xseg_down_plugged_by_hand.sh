#!/usr/bin/env bash
# xseg down of a path (filed, vlmcd) with a write-back cached plugged in
# front of filed by hand (xseg plug; not a line of the file) that holds
# dirty data. down must not stop filed behind that live cache: it once
# SIGTERMed filed, cleared port 1's route to the cache, removed the
# segment and exited 0, leaving the cache nowhere to write back (the
# acknowledged writes lost). Now: exit 1 naming port 3 and its dirty
# bytes, filed and the segment kept; once the cache is unplugged (it writes
# back) and stopped, down removes everything and every byte reads back
# from filed.
set -u
SEG_PREFIX=xseg-down-plug
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/up_lib.sh"

# filed gives up its own stop after 3 s (the old down waited that long)
path=$DIR/path.path
cat > "$path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data stop-timeout=3
peer vlmcd port=2 blocker-port=1 volume=vol:16M object-size=1M
EOT
"$BIN/xseg" up "$path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M --object-size 1M \
	--write-policy writeback --dirty-high 100 --dirty-low 100 --daemon \
	--pidfile "$DIR/cached.pid" 2>> "$DIR/cached.log" || fail "cached did not start"
pids+=($(cat "$DIR/cached.pid"))
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size 16M --block-size 64K --iodepth 8 --seed 5 --verify full \
		--timeout 30 --json > "$DIR/$1.out" 2> "$DIR/$1.err" ||
		fail "$1: $(tail -2 "$DIR/$1.err")"
}
bench write
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "nothing dirty in the cache: the test would prove nothing"
echo "the hand-plugged cache holds $d dirty bytes"
fpid=$(cat "$RUN/1-filed.pid")

echo "--- down: refused behind the live cache (exit 1, filed and the segment kept)"
expect_exit 1 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
cat "$DIR/out" "$DIR/err"
alive "$fpid" || fail "down stopped filed behind a live dirty cache"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 || fail "down removed the segment"
[ "$(port_info 1 next_hop)" = 3 ] || fail "down cleared port 1's route to the cache"
grep -q "port 3 .*$d dirty bytes" "$DIR/err" && grep -q "unplug" "$DIR/err" ||
	fail "down did not name port 3, its $d dirty bytes and what to do: $(cat "$DIR/err")"

echo "--- unplugged (written back) and stopped: down removes everything"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug"
cpid=$(cat "$DIR/cached.pid")
kill -TERM "$cpid"
for _ in $(seq 200); do alive "$cpid" || break; sleep 0.05; done
expect_exit 0 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "segment left after down"

echo "--- every byte from filed alone"
plain=$DIR/plain.path
printf 'segment %s ports=16\npeer filed port=1 dir=%s\npeer vlmcd port=2 blocker-port=1 volume=vol:16M object-size=1M\n' \
	"$SEG" "$DIR/data" > "$plain"
"$BIN/xseg" up "$plain" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
bench read
expect_exit 0 "$BIN/xseg" down "$plain" --run-dir "$RUN"
echo "ok"
