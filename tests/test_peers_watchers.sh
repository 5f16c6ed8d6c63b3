#!/usr/bin/env bash
# The runtime's --watchers (docs/peers.md): bad values exit 2 naming
# them; the default is the bound ports, at least 2, at most --threads
# (filed, whose workers block on files: every worker); a
# cache with one watcher and five workers on the bench calls them under
# cold misses (bench_calls), serves verified data, and on SIGTERM in the middle
# of a verified write run (dirty data in it: checked) writes every
# acknowledged byte back to filed, every benched worker woken.
set -u
SEG_PREFIX=peers-watchers
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"

echo "--- bad values"
bad_arg "0" "$BIN/nulld" --segment "$SEG" --port 2 --watchers 0
bad_arg "257" "$BIN/nulld" --segment "$SEG" --port 2 --watchers 257
bad_arg "two" "$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/d" --watchers two

echo "--- defaults"
watchers_of() {   # PORT: the peer's watchers, as its figures give them
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json |
		python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["threads"], d["watchers"])'
}
expect_watchers() {   # WANT(threads watchers) PORT ARGS...: a nulld started with ARGS
	local want=$1 port=$2; shift 2
	"$BIN/nulld" --segment "$SEG" --port "$port" "$@" 2> "$DIR/nulld.log" & local pid=$!
	wait_bound "$port"
	local got; got=$(watchers_of "$port")
	kill -TERM $pid; wait $pid
	wait_unbound "$port"
	[ "$got" = "$want" ] || fail "nulld $*: threads and watchers '$got', expected '$want'"
	echo "nulld $*: threads watchers $got"
}
expect_watchers "1 1" 2 --threads 1
expect_watchers "6 2" 2 --threads 6
expect_watchers "6 4" 2 --threads 6 --lanes 4
expect_watchers "6 3" 2 --threads 6 --watchers 3
# filed's workers block on files: every one watches
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/f" --threads 6 2> "$DIR/filed.log" & fpid=$!
wait_bound 1
got=$(watchers_of 1)
kill -TERM $fpid; wait $fpid
wait_unbound 1
[ "$got" = "6 6" ] || fail "filed --threads 6: threads and watchers '$got', expected '6 6'"
echo "filed --threads 6: threads watchers $got"

echo "--- one watcher, five on the bench: verified data, a stop mid-write"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 \
	2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 256M \
	--write-policy writeback --dirty-high 95 --dirty-low 90 --threads 6 --watchers 1 \
	2> "$DIR/cached.log" & cpid=$!; pids+=($cpid)
wait_bound 3

bench() {   # OP PORT PREFIX OUT [more]
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$2" --op "$1" --prefix "$3" \
		--pattern rand --block-size 4K --iodepth 64 --total-size 16M --object-size 1M \
		--seed 7 --timeout 10 --json "${@:5}" > "$4" 2> "$4.err"
}
bench write 3 warm "$DIR/w0.out" --verify full || { cat "$DIR/w0.out.err"; fail "write through one watcher"; }
bench read 3 warm "$DIR/r0.out" --verify full || { cat "$DIR/r0.out.err"; fail "read through one watcher"; }
[ "$(json "$DIR/r0.out" corrupted)" = 0 ] && [ "$(json "$DIR/r0.out" failed)" = 0 ] ||
	fail "verified reads through one watcher: $(tail -1 "$DIR/r0.out")"
# cold misses (objects filed has, not cached): cached's sends are out, so
# a busy watcher calls benched workers (hits alone need not: short work on
# one ring, peers/runtime/watch.c)
bench write 1 cold "$DIR/c0.out" --verify full || { cat "$DIR/c0.out.err"; fail "write to filed"; }
bench read 3 cold "$DIR/c1.out" --verify full || { cat "$DIR/c1.out.err"; fail "cold reads through one watcher"; }
[ "$(json "$DIR/c1.out" corrupted)" = 0 ] && [ "$(json "$DIR/c1.out" failed)" = 0 ] ||
	fail "verified cold reads through one watcher: $(tail -1 "$DIR/c1.out")"
calls=$(peer_stat 3 bench_calls)
echo "bench_calls after 32M of 4K hits and 16M of cold misses at depth 64: $calls"
[ "$calls" -gt 0 ] || fail "no worker was ever called off the bench"

# a long write run, SIGTERM once it put 4M more in cached, still dirty
before=$(port_info 3 dirty_bytes)
bench write 3 acked "$DIR/w.out" --verify full --runtime 30 --unacked "$DIR/unacked" & bpid=$!
for _ in $(seq 100); do
	[ "$(port_info 3 dirty_bytes)" -gt $((before + (4 << 20))) ] && break
	sleep 0.05
done
dirty=$(port_info 3 dirty_bytes)
echo "dirty in cached before the stop: $dirty bytes ($before before the run)"
[ "$dirty" -gt $((before + (4 << 20))) ] || fail "the run put no 4M dirty in cached: the stop would prove little"
start=$SECONDS
kill -TERM "$cpid"; wait "$cpid"; crc=$?
wait "$bpid"
echo "cached exited $crc after $((SECONDS - start)) s; the write run: requests $(json "$DIR/w.out" requests), failed $(json "$DIR/w.out" failed)"
[ "$crc" = 0 ] || fail "cached exited $crc"
bench read 1 acked "$DIR/r.out" --verify full --may-differ "$DIR/unacked" || true
echo "read back from filed: corrupted $(json "$DIR/r.out" corrupted), failed $(json "$DIR/r.out" failed), differed $(json "$DIR/r.out" differed)"
[ "$(json "$DIR/r.out" corrupted)" = 0 ] && [ "$(json "$DIR/r.out" failed)" = 0 ] ||
	fail "acknowledged writes are not on filed after cached's stop"
echo "--- a watcher spinning longer than --stop-timeout: an idle peer still stops at once"
# (the spin looked only for work: the stop gave up after --stop-timeout,
# exit 1, and filed's fini, its final sync, never ran)
"$BIN/filed" --segment "$SEG" --port 5 --dir "$DIR/spin" --threads 2 --spin-us 5000000 \
	--stop-timeout 2 --log-level info 2> "$DIR/spin.log" & spid=$!
wait_bound 5
"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 5 --op write --pattern seq \
	--block-size 4K --total-size 1M --iodepth 4 --verify full --json > "$DIR/spin.out" 2>&1 ||
	fail "writes to the spinning filed: $(tail -1 "$DIR/spin.out")"
sleep 0.5   # idle: its watchers spin
t0=$(date +%s%N)
kill -TERM $spid; wait $spid; src=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "filed --spin-us 5000000 --stop-timeout 2: exit $src after $ms ms"
[ $src = 0 ] || fail "the idle filed's stop failed (exit $src): $(grep -i 'gave up' "$DIR/spin.log")"
[ $ms -lt 1500 ] || fail "the idle filed took $ms ms to stop"
echo "PASS"
