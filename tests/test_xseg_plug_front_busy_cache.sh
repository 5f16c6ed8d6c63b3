#!/usr/bin/env bash
# `xseg plug --port 3 --via 4` in front of a cache (3) that still has a
# request under way: the plug must wait until port 3 has answered it.
# The tool read port 3's "stats" into 4K; a cache's answer, with its
# latency buckets, passes that after some load (a mix of reads and writes
# here), came back cut short, did not parse, and was taken for a peer
# that answers no stats: the tool slept 1 s and said "plugged" with the
# request still under way at port 3 (and under load every plug in front
# of a cache held all of the path's requests for that 1 s). A read miss
# of cache 3 is held 3 s in filed's pread (strace delay injection) while
# the plug runs. Skipped without strace, or where it cannot attach.
set -u
SEG_PREFIX=xseg-plug-front-busy
. "$(dirname "$0")/lib.sh"

command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 --delay-us 100 \
	2> "$DIR/filed.log" & FILED=$!
pids+=($FILED)
wait_bound 1
for p in 3 4; do
	"$BIN/cached" --segment "$SEG" --port "$p" --blocker-port 1 --cache-size 8M \
		--object-size 1M 2>> "$DIR/cached$p.log" & pids+=($!)
	wait_bound "$p"
done
# on filed before the plug: a miss of cache 3 later, read from filed
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --target cold --op write \
	--data COLDCOLD > /dev/null || fail "WRITE cold"
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"

# Load of many sizes and depths through cache 3: latencies over many
# buckets, so that its stats answer passes 4K.
bench() {
	timeout 60 "$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$1" \
		--pattern rand --total-size 8M --block-size "$2" --object-size 1M --iodepth "$3" \
		--runtime 0.4 --json > /dev/null 2>&1 || fail "bench $*"
}
for bs in 4K 64K 512K; do for d in 1 128; do bench write $bs $d; done; done
for bs in 4K 16K 64K 256K 512K; do for d in 1 8 128; do bench read $bs $d; done; done
# Over 4K (4.5-4.8K here), the old tool's cut answer showed: the wait
# below holds whatever the size, which is only said.
size=$("$BIN/xseg" stats --segment "$SEG" --port 3 --json | wc -c)
[ "$size" -gt 4096 ] || echo "note: cache 3's stats answer is $size bytes, not over 4K"

# every pread of filed's held 3 s from here, until strace is killed
strace_delay "$FILED" pread64 3000000
# a miss: cache 3 loads it from filed, whose pread holds it
"$BIN/xreq" --segment "$SEG" --port 11 --target-port 1 --target cold --op read --size 8 \
	--timeout 60 > "$DIR/r.out" 2>&1 & R=$!
inflight=0
for _ in $(seq 100); do
	sleep 0.02
	inflight=$(peer_stat 3 in_flight 2>/dev/null) || inflight=0
	[ "$inflight" -ge 1 ] && break
done
[ "$inflight" -ge 1 ] || fail "the read miss was not seen under way at cache 3"
timeout 60 "$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 > "$DIR/plug.out" 2>&1 ||
	fail "plug 3 via 4: $(cat "$DIR/plug.out")"
kill -0 $R 2> /dev/null &&
	fail "xseg plug --port 3 --via 4 ended while cache 3 still had a read under way" \
	     "(its stats answer: $size bytes)"
wait $R || fail "the read: $(cat "$DIR/r.out")"
[ "$(port_info 3 next_hop)" = 4 ] || fail "port 3 does not route to 4"
echo "a plug in front of a busy cache (stats answer $size bytes) waits for it: ok"
