#!/usr/bin/env bash
# Unplug, writes straight to the blocker, plug again: cached held the
# blocks clean from before the unplug, and after the plug its hits served
# them, older than the writes acknowledged meanwhile (found by review). A
# plug now drops what the cache holds clean before it serves again. Data
# at risk checked first: the blocks are cached (cached_bytes) before the
# unplug; then a verified read through the plugged path must see the
# writes made while unplugged, and a partial write then must not merge
# into an old copy (read back whole from filed). And a plug in front of a
# port that is not the cache's blocker (nor in front of it) is refused: it
# sent that port's requests to another blocker, exit 0 (found by review).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=cached-replug
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
	--write-policy writeback 2> "$DIR/cached.log" & pids+=($!)
wait_bound 3
# a volume: another seed writes other data into the same objects
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:4M 2> "$DIR/vlmcd.log" &
pids+=($!)
wait_bound 2
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

bench() {   # bench OP SEED: the volume's 4M in 4K blocks, verified
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--seed "$2" --pattern rand --total-size 4M --block-size 4K --iodepth 8 \
		--verify full --timeout 30 --json > "$DIR/b.out" 2> "$DIR/b.err" ||
		{ cat "$DIR/b.err"; tail -1 "$DIR/b.out"; return 1; }
	tail -1 "$DIR/b.out" | grep -q '"failed":0,"corrupted":0' ||
		{ tail -1 "$DIR/b.out"; return 1; }
}

bench write 1 || fail "writes through the cache"
bench read 1 || fail "reads through the cache"
held=$(peer_stat 3 cached_bytes) || fail "cached's stats"
[ "$held" -ge $((4 << 20)) ] || fail "cached holds $held bytes, not the 4M written: nothing at risk"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug"

echo "--- unplugged: new data straight to filed"
bench write 2 || fail "writes while unplugged"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug again"

echo "--- plugged again: reads through the cache see the new data"
bench read 2 || fail "a read through the cache after the plug served data older than" \
	"the writes acknowledged while it was unplugged (cached held $held bytes)"
echo "--- a partial write, then the whole block from filed"
"$BIN/xreq" --segment "$SEG" --port 10 --target-port 1 --op write --target top \
	--size 8K --data "old " > /dev/null || fail "WRITE top"
"$BIN/xreq" --segment "$SEG" --port 10 --target-port 1 --op read --target top --size 8K \
	> /dev/null || fail "READ top"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug 2"
"$BIN/xreq" --segment "$SEG" --port 10 --target-port 1 --op write --target top \
	--size 8K --data "new " > /dev/null || fail "WRITE top while unplugged"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 3"
"$BIN/xreq" --segment "$SEG" --port 10 --target-port 1 --op write --target top \
	--offset 100 --size 4 --data "PART" > /dev/null || fail "partial WRITE top"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug 3 (writes back)"
got=$("$BIN/xreq" --segment "$SEG" --port 10 --target-port 1 --op read --target top --size 8K)
echo "$got" | grep -q "data='new new " || fail "filed holds the old bytes around a partial write: $got"
echo "$got" | grep -q "old " && fail "the old copy was merged into the partial write: $got"
echo "--- a plug in front of a port that is not the cache's blocker is refused"
"$BIN/filed" --segment "$SEG" --port 5 --dir "$DIR/data5" 2> "$DIR/filed5.log" & pids+=($!)
wait_bound 5
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug 4"
expect_exit 1 "$BIN/xseg" plug --segment "$SEG" --port 5 --via 3
grep -q "port 3 refused: it writes to another blocker port than 5" "$DIR/err" ||
	fail "the refused plug did not say why: $(cat "$DIR/err")"
[ "$(port_info 5 next_hop)" = None ] || fail "port 5 routed via $(port_info 5 next_hop) after a refused plug"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "the right plug after a refused one"
echo "a plug forgets what the cache held clean, and goes only in front of its blocker: ok"
