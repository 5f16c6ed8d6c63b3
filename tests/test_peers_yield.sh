#!/usr/bin/env bash
# The runtime's --yield (docs/peers.md): a bad value exits 2 naming it;
# on one shared CPU a forwarder with --yield auto gives the CPU up after
# its rounds of work (cpu_yields counts them) and one with --yield never
# does not, nor does filed (no request of its own out); verified data
# passes through both either way. (What it buys is measured in bench/,
# run-yield-ab.sh, not here.)
set -u
SEG_PREFIX=peers-yield
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 256 --heap 32M || fail "create"

echo "--- bad values"
bad_arg "bogus" "$BIN/nulld" --segment "$SEG" --port 2 --yield bogus
bad_arg "--yield" "$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/d" --yield ""

echo "--- one CPU: filed behind two forwarders, verified traffic"
ON_ONE=(taskset -c "$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')")
"${ON_ONE[@]}" "$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 \
	2> "$DIR/filed.log" & pids+=($!)
"${ON_ONE[@]}" "$BIN/nulld" --segment "$SEG" --port 2 --forward 1 --yield auto \
	2> "$DIR/auto.log" & pids+=($!)
"${ON_ONE[@]}" "$BIN/nulld" --segment "$SEG" --port 3 --forward 1 --yield never \
	2> "$DIR/never.log" & pids+=($!)
for p in 1 2 3; do wait_bound $p; done

bench() {   # port op seed
	"${ON_ONE[@]}" "$BIN/bench-xseg" --segment "$SEG" --port 5 --target-port "$1" --op "$2" \
		--pattern rand --block-size 4K --iodepth 16 --total-size 32M --object-size 1M \
		--seed "$3" --verify full --timeout 30 --json > "$DIR/bench.out" 2> "$DIR/bench.err" ||
		{ cat "$DIR/bench.err"; fail "bench-xseg to port $1: $2"; }
	tail -1 "$DIR/bench.out" | grep -q '"failed":0,"corrupted":0' ||
		fail "bench-xseg to port $1, $2: $(tail -1 "$DIR/bench.out")"
}
for port in 2 3; do
	bench $port write $port
	bench $port read $port
done

yields() {
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["cpu_yields"])'
}
auto=$(yields 2) never=$(yields 3) filed=$(yields 1)
echo "cpu_yields: auto $auto, never $never, filed $filed"
[ "$auto" -gt 0 ] || fail "--yield auto on a shared CPU never yielded"
[ "$never" = 0 ] || fail "--yield never yielded $never times"
[ "$filed" = 0 ] || fail "filed (nothing of its own out) yielded $filed times"
echo "PASS"
