#!/usr/bin/env bash
# Lanes through a path (issue 24): two clients -> vlmcd --lanes 2 --threads 2
# -> filed --lanes 2 (objects of 1M). Each client queues on a vlmcd lane of
# its own. A request within one object goes on from the lane it came in on
# (vlmcd renames and forwards it); a request across objects is split into
# vlmcd's own requests, which each worker sends from its own lane. So both
# of filed's lanes take requests in each phase (with vlmcd's own requests
# from its first port, filed's second lane would take none of the split
# ones). Verified writes, then verified reads of every byte, from both
# clients at once: 4K blocks, then blocks of 1.5M (each across two objects).
set -u
SEG_PREFIX=peers-lanes
. "$(dirname "$0")/lib.sh"

bench() {   # bench OP VOLUME FROM OUT BLOCK PATTERN TOTAL DEPTH
	"$BIN/bench-xseg" --segment "$SEG" --port "$3" --target-port 4 --volume "$2" --op "$1" \
		--pattern "$6" --total-size "$7" --block-size "$5" --object-size "$7" --iodepth "$8" \
		--seed "$3" --verify full --timeout 30 --json > "$4" 2> "$4.err"
}
both() {   # both OP BLOCK PATTERN TOTAL DEPTH: the two clients at once, a volume each
	bench "$1" a 10 "$DIR/$1-a.out" "${@:2}" & local a=$!
	bench "$1" b 11 "$DIR/$1-b.out" "${@:2}" & local b=$!
	wait $a || fail "$1 from port 10: $(tail -2 "$DIR/$1-a.out.err")"
	wait $b || fail "$1 from port 11: $(tail -2 "$DIR/$1-b.out.err")"
	for c in a b; do
		[ "$(json "$DIR/$1-$c.out" failed)" = 0 ] || fail "$1 on volume $c: requests failed"
		[ "$(json "$DIR/$1-$c.out" corrupted 2>/dev/null || echo 0)" = 0 ] ||
			fail "$1 on volume $c: blocks differ"
	done
}
# phase NAME FIGURE BOTH-ARGS...: writes and reads; both of filed's lanes
# take requests, and vlmcd's FIGURE (renamed or split) counts them.
phase() {
	local name=$1 figure=$2 f1 f2 n; shift 2
	f1=$(port_info 1 submitted) f2=$(port_info 2 submitted) n=$(peer_stat 4 "$figure")
	both write "$@"
	both read "$@"
	[ "$(peer_stat 4 "$figure")" -gt "$n" ] || fail "$name: vlmcd's $figure did not move"
	[ "$(port_info 1 submitted)" -gt "$f1" ] || fail "$name: filed's lane 1 took no request"
	[ "$(port_info 2 submitted)" -gt "$f2" ] ||
		fail "$name: filed's lane 2 took no request: vlmcd's requests all left from one lane"
	echo "$name: filed's lanes took $(($(port_info 1 submitted) - f1)) and $(($(port_info 2 submitted) - f2)) requests; every byte read back"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --lanes 2 --dir "$DIR/data" 2> "$DIR/filed.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 4 --lanes 2 --threads 2 --blocker-port 1 --object-size 1M \
	--volume a:8M --volume b:8M 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 1; wait_bound 4
phase "within one object (renamed)" renamed 4K rand 8M 16
phase "across objects (split)" split 1536K seq 7680K 4
for p in 4 5; do [ "$(port_info $p submitted)" -gt 0 ] || fail "vlmcd's lane $p took no request"; done
echo "lanes through vlmcd to filed: ok"
