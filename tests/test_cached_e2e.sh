#!/usr/bin/env bash
# cached end to end with the real peers: bench-xseg -> (route) cached -> filed,
# write-back and write-through, cache at 2x, 0.5x and 0.1x the workload, seq
# and rand, --verify full. After SIGTERM (which writes every dirty byte back)
# the data read straight from filed is exactly what was written.
set -u
BIN=${BIN:-$PWD/build/bin}
SEG=cached-e2e-$$
DIR=$(mktemp -d)
pids=()
fail() { echo "FAIL: $*"; exit 1; }
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

wait_bound() {   # port
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(p['port']==$1 and p.get('owner') for p in d['port_list']) else 1)" && return 0
		sleep 0.05
	done
	fail "nobody bound port $1"
}

bench() {   # op pattern extra...
	local op=$1 pattern=$2; shift 2
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op "$op" \
		--pattern "$pattern" --object-size 64K --verify full --timeout 60 "$@" --json \
		> "$DIR/bench.out" 2> "$DIR/bench.err" || { cat "$DIR/bench.err"; tail -3 "$DIR/bench.out"; fail "bench-xseg $op $pattern $*"; }
	tail -1 "$DIR/bench.out" | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['failed']==0 and d['corrupted']==0, d" ||
		fail "bench-xseg $op $pattern reported failures"
}

run_case() {   # policy cache_size pattern seed
	local policy=$1 csize=$2 pattern=$3 seed=$4
	echo "--- $policy, cache $csize, $pattern"
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size "$csize" \
		--max-objects 64 --object-size 64K --write-policy "$policy" --threads 2 \
		2> "$DIR/cached.log" & local cpid=$!
	pids+=($cpid)
	wait_bound 3
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
	bench write "$pattern" --total-size 4M --block-size 8K --iodepth 16 --seed "$seed"
	bench read "$pattern" --total-size 4M --block-size 4K --iodepth 16 --seed "$seed"
	kill -TERM "$cpid"
	wait "$cpid" || { cat "$DIR/cached.log"; fail "cached exited non-zero after SIGTERM"; }
	"$BIN/xseg" route --segment "$SEG" --port 1 --clear
	# straight from filed now: every byte written through the cache is there
	bench read seq --total-size 4M --block-size 64K --iodepth 4 --seed "$seed"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
wait_bound 1

run_case writeback 8M seq 1        # cache 2x the workload
run_case writeback 2M rand 2       # 0.5x
run_case writeback 400K rand 3     # 0.1x
run_case writethrough 2M rand 4
run_case writethrough 400K seq 5
echo "cached end to end: ok"
