#!/usr/bin/env bash
# cached end to end with the real peers: bench-xseg -> (route) cached -> filed,
# write-back and write-through, cache at 2x, 0.5x and 0.1x the workload, seq
# and rand, --verify full. After SIGTERM (which writes every dirty byte back)
# the data read straight from filed is exactly what was written. Under load,
# plug/unplug and SIGTERM while plugged fail no request.
set -u
SEG_PREFIX=cached-e2e
. "$(dirname "$0")/lib.sh"

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

echo "--- write policy switched online"
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 8M --max-objects 64 \
	--object-size 64K --write-policy writeback --threads 2 2> "$DIR/cached.log" & cpid=$!
pids+=($cpid)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"
bench write rand --total-size 2M --block-size 4K --iodepth 16 --seed 30
stat_is() { "$BIN/xseg" stats --segment "$SEG" --port 3 --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert $1, d"; }
stat_is "d['dirty_bytes'] > 0" || fail "write-back left nothing dirty"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough || fail "policy switch"
stat_is "d['dirty_bytes'] == 0 and d['policy'] == 'writethrough'" || fail "switch to write-through left dirty data"
bench write rand --total-size 2M --block-size 4K --iodepth 16 --seed 31
stat_is "d['dirty_bytes'] == 0" || fail "write-through made dirty data"
# each of those 512 writes went to filed as the client's own request
stat_is "d['lent'] >= 512" || fail "write-through writes were not lent to filed"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback || fail "policy back"
"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug"
kill -TERM "$cpid"; wait "$cpid" || fail "cached exit status"
bench read seq --total-size 2M --block-size 64K --iodepth 4 --seed 30
bench read seq --total-size 2M --block-size 64K --iodepth 4 --seed 31

# Writers run back to back (a new seed each run, from $1) until stop_load;
# every run must end with 0 failed. Seeds that ran go to $DIR/seeds.
start_load() {
	rm -f "$DIR/stop-load" "$DIR/seeds"
	( seed=$1
	  while [ ! -e "$DIR/stop-load" ]; do
		"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 1 --op write --pattern rand \
			--object-size 64K --verify full --timeout 60 --total-size 8M --block-size 4K \
			--iodepth 4 --seed $seed --json > "$DIR/load.out" 2> "$DIR/load.err" || exit 1
		tail -1 "$DIR/load.out" | grep -q '"failed":0,' || exit 1
		echo $seed >> "$DIR/seeds"; seed=$((seed + 1))
	  done ) & load=$!
}
stop_load() {   # what: fails unless every run succeeded and the data is on filed
	touch "$DIR/stop-load"
	wait "$load" || { cat "$DIR/load.err"; tail -1 "$DIR/load.out"; fail "$1: writes failed"; }
	[ "$(wc -l < "$DIR/seeds")" -ge 2 ] || fail "$1: the load ran too little to overlap"
	while read -r seed; do
		"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 1 --op read --pattern seq \
			--object-size 64K --verify full --total-size 8M --block-size 64K --iodepth 8 \
			--seed "$seed" >/dev/null 2>"$DIR/load.err" ||
			{ cat "$DIR/load.err"; fail "$1: seed $seed: data is not intact on filed"; }
	done < "$DIR/seeds"
}
start_cached() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 4M --max-objects 64 \
		--object-size 64K --write-policy writeback --threads 2 2> "$DIR/cached.log" & cpid=$!
	pids+=($cpid)
	wait_bound 3
}

echo "--- plug and unplug under load"
start_load 20
start_cached
for round in 1 2 3; do
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug under load"
	sleep 0.4
	"$BIN/xseg" stats --segment "$SEG" --port 3 --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['policy']=='writeback' and d['write_bytes']>0, d" ||
		fail "round $round: cached saw no write-back traffic while plugged"
	"$BIN/xseg" unplug --segment "$SEG" --via 3 || fail "unplug under load"
	"$BIN/xseg" stats --segment "$SEG" --port 3 --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['dirty_bytes']==0 and d['policy']=='writethrough', d" ||
		fail "cached not clean and write-through after unplug"
	"$BIN/xseg" info --segment "$SEG" --json | grep -q '"next_hop":3' && fail "route left after unplug"
	sleep 0.2
done
kill -TERM "$cpid"; wait "$cpid" || fail "cached exit status after unplug"
stop_load "plug and unplug under load"

echo "--- SIGTERM while plugged, under load: the route is restored, no request fails"
start_load 40
for round in 1 2 3; do
	start_cached
	"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug under load"
	sleep 0.4
	kill -TERM "$cpid"; wait "$cpid" || { cat "$DIR/cached.log"; fail "cached exit status after SIGTERM"; }
	"$BIN/xseg" info --segment "$SEG" --json | grep -q '"next_hop":3' && fail "route left after SIGTERM"
	sleep 0.2
done
stop_load "SIGTERM while plugged"
echo "cached end to end: ok"
