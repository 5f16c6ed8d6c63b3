#!/usr/bin/env bash
# Lanes through a path (issue 24): two clients -> vlmcd --lanes 2 --threads 2
# -> filed --lanes 2. Each client queues on a vlmcd lane of its own, and
# each vlmcd worker sends its object requests from its own lane, so both of
# filed's lanes take requests (with every request from vlmcd's first port,
# filed's second lane would take none). Verified writes, then verified
# reads of every byte, from both clients at once.
set -u
SEG_PREFIX=peers-lanes
. "$(dirname "$0")/lib.sh"

json() { tail -1 "$1" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['$2'])"; }
submitted() {   # submitted PORT
	"$BIN/xseg" info --segment "$SEG" --json --all | python3 -c "
import json,sys
print([p for p in json.load(sys.stdin)['port_list'] if p['port']==$1][0]['submitted'])"
}
bench() {   # bench OP VOLUME FROM OUT
	"$BIN/bench-xseg" --segment "$SEG" --port "$3" --target-port 4 --volume "$2" --op "$1" \
		--pattern rand --total-size 8M --block-size 4K --iodepth 16 --seed "$3" \
		--verify full --timeout 30 --json > "$4" 2> "$4.err"
}
both() {   # both OP: the two clients at once, each on its own volume
	bench "$1" a 10 "$DIR/$1-a.out" & local a=$!
	bench "$1" b 11 "$DIR/$1-b.out" & local b=$!
	wait $a || fail "$1 from port 10: $(tail -2 "$DIR/$1-a.out.err")"
	wait $b || fail "$1 from port 11: $(tail -2 "$DIR/$1-b.out.err")"
	for c in a b; do
		[ "$(json "$DIR/$1-$c.out" failed)" = 0 ] || fail "$1 on volume $c: requests failed"
		[ "$(json "$DIR/$1-$c.out" corrupted 2>/dev/null || echo 0)" = 0 ] ||
			fail "$1 on volume $c: blocks differ"
	done
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --lanes 2 --dir "$DIR/data" 2> "$DIR/filed.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 4 --lanes 2 --threads 2 --blocker-port 1 \
	--volume a:8M --volume b:8M 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 4
both write
both read
for p in 4 5; do [ "$(submitted $p)" -gt 0 ] || fail "vlmcd's lane $p took no request"; done
for p in 1 2; do
	[ "$(submitted $p)" -gt 0 ] || fail "filed's lane $p took no request: vlmcd's workers did not send from their own lanes"
done
echo "filed's lanes took $(submitted 1) and $(submitted 2) requests; every byte read back: ok"
