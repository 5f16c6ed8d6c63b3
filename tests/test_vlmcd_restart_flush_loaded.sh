#!/usr/bin/env bash
# test_vlmcd_restart_flush.sh under load: a FLUSH through a vlmcd started
# after the old one was SIGKILLed mid-load covers every write the old one
# acknowledged. bench-xseg -> vlmcd -> cached (write-back, --dirty-high
# 100 and room for the whole volume: nothing is written back unless a
# FLUSH asks) -> filed. bench-xseg writes, verified, pass after pass over
# one volume; vlmcd is SIGKILLed while writes are out (those may fail:
# only the acknowledged count) and a new one takes its port. Before the
# FLUSH the data is at risk: cached holds dirty bytes and filed, read
# through a second vlmcd straight onto it, lacks acknowledged blocks.
# The FLUSH through the new vlmcd is answered; cached is then SIGKILLed
# (its memory lost: no --persist) and every acknowledged byte must read
# back from filed, its files with no dirty page (cachestat(2), where the
# kernel has it). A new vlmcd whose empty "written since the last
# FLUSH" set was trusted answered the FLUSH with nothing flushed.
set -u
SEG_PREFIX=vlmcd-restart-flush-loaded
. "$(dirname "$0")/lib.sh"

VOL=16M BLOCKS=4096   # 4K blocks
# bench OP PORT TARGET OUT [extra...]: the volume's 4K blocks, random order.
bench() {
	local op=$1 port=$2 target=$3 out=$4; shift 4
	"$BIN/bench-xseg" --segment "$SEG" --port "$port" --target-port "$target" --volume vol \
		--op "$op" --pattern rand --total-size $VOL --block-size 4K --iodepth 16 --seed 7 \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
start_vlmcd() {   # start_vlmcd LOG
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:$VOL \
		2> "$DIR/$1" & vpid=$!
	pids+=($vpid)
	wait_bound 2
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M \
	--write-policy writeback --dirty-high 100 --dirty-low 100 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
start_vlmcd vlmcd0.log
# Straight onto filed, no cache: what filed holds.
"$BIN/vlmcd" --segment "$SEG" --port 4 --blocker-port 1 --volume vol:$VOL \
	2> "$DIR/vlmcd-filed.log" & pids+=($!)
wait_bound 4

# Pass after pass (the same data each pass) until the kill: bench-xseg
# stops at the first submit that finds vlmcd gone.
bench write 10 2 "$DIR/w.out" --runtime 60 --unacked "$DIR/unacked" & wpid=$!
# Killed past the first pass (every block acknowledged once and dirty in
# cached: 1.5 volumes taken), at a random moment after.
for _ in $(seq 1000); do
	[ "$(peer_stat 3 write_bytes 2>/dev/null || echo 0)" -gt $((BLOCKS * 6144)) ] && break
	sleep 0.01
done
[ "$(peer_stat 3 write_bytes)" -gt $((BLOCKS * 6144)) ] || fail "cached took too few writes"
sleep "0.$((RANDOM % 3))"
kill -KILL "$vpid"; wait "$vpid" 2>/dev/null
wait "$wpid"; rc=$?
[ "$rc" -ne 3 ] || fail "bench-xseg hung after vlmcd died"
failed=$(json "$DIR/w.out" failed) || fail "no result from bench-xseg: $(tail -3 "$DIR/w.out.err")"
n=$(json "$DIR/w.out" requests)
[ "$failed" -gt 0 ] || fail "no write failed: vlmcd was not killed under load"
echo "vlmcd killed after $n writes, $failed failed, $(json "$DIR/w.out" unacked) blocks never acknowledged"
wait_unbound 2
start_vlmcd vlmcd1.log

# At risk: filed lacks acknowledged blocks, cached holds them dirty.
bench read 11 4 "$DIR/before.out" --may-differ "$DIR/unacked"
[ "$(json "$DIR/before.out" failed)" = 0 ] || fail "reading filed before the FLUSH failed"
lacking=$(json "$DIR/before.out" corrupted)
[ "$lacking" -gt 0 ] || fail "filed held every acknowledged block before the FLUSH: nothing was at risk"
dirty=$(peer_stat 3 dirty_bytes)
[ "$dirty" -gt 0 ] || fail "cached held no dirty byte before the FLUSH: nothing was at risk"
echo "before the FLUSH: cached $dirty bytes dirty, filed lacks $lacking acknowledged blocks"

timeout 40 "$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op flush --target vol \
	--timeout 30 > "$DIR/flush.out" 2>&1 || fail "FLUSH through the new vlmcd: $(cat "$DIR/flush.out")"
grep -q '^SERVED' "$DIR/flush.out" || fail "FLUSH: $(cat "$DIR/flush.out")"
left=$(peer_stat 3 dirty_bytes)

# cached's memory is lost: what the FLUSH did not put on filed is gone.
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
bench read 11 4 "$DIR/after.out" --may-differ "$DIR/unacked"
[ "$(json "$DIR/after.out" failed)" = 0 ] || fail "reading filed after the FLUSH failed"
c=$(json "$DIR/after.out" corrupted)
[ "$c" = 0 ] ||
	fail "FLUSH answered OK through the restarted vlmcd, yet $c acknowledged blocks were not on filed when cached died ($left bytes were still dirty after it)"
# ... and durable there: cached passed the FLUSH on to filed, which synced.
p=$(dirty_pages "$DIR"/data/vol_*)
[ "$p" = none ] || [ "$p" = 0 ] ||
	fail "FLUSH answered OK through the restarted vlmcd with $p pages of filed's files not on disk"
echo "every acknowledged write was on filed after the FLUSH through the restarted vlmcd: ok"
