#!/usr/bin/env bash
# xseg down of a path whose write-back cache crashed (SIGKILL) and was
# restarted by hand on its persist file, as the fail-closed message
# advises: its pidfile in the run directory is stale, another pid serves
# its port, and down leaves it running. down once went on and stopped
# filed behind it (and cleared the route to it): the cache could never
# write back its dirty data. Both a cache plugged in front of filed
# (plug=1) and one that vlmcd sends to (blocker-port=3, no route): filed
# must not be stopped (exit 1, saying why), and once the cache is stopped
# (it writes back) down removes everything and every byte reads back.
set -u
SEG_PREFIX=xseg-down-left
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/up_lib.sh"

bench() {   # bench OP
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size 8M --block-size 64K --iodepth 8 --seed 6 --verify full \
		--timeout 30 --json > "$DIR/$1.out" 2> "$DIR/$1.err" ||
		fail "$1: $(tail -2 "$DIR/$1.err")"
}
cache="cache-size=32M object-size=1M write-policy=writeback dirty-high=100 dirty-low=100"

# one_case NAME: $DIR/NAME.path written by the caller; cached on port 3
one_case() {
	local path=$DIR/$1.path data=$DIR/data-$1
	rm -f "$DIR/$1.persist"
	"$BIN/xseg" up "$path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
	bench write
	local d; d=$(peer_stat 3 dirty_bytes)
	[ "$d" -gt 0 ] || fail "$1: nothing dirty in the cache: the test would prove nothing"

	local cpid; cpid=$(cat "$RUN/3-cached.pid")
	kill -KILL "$cpid"
	for _ in $(seq 100); do alive "$cpid" || break; sleep 0.05; done
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M --object-size 1M \
		--write-policy writeback --dirty-high 100 --dirty-low 100 --persist "$DIR/$1.persist" \
		--daemon --pidfile "$DIR/hand.pid" 2>> "$DIR/hand.log" || fail "$1: cached restart"
	local hand; hand=$(cat "$DIR/hand.pid"); pids+=($hand)
	[ "$(peer_stat 3 dirty_bytes)" -gt 0 ] || fail "$1: the restarted cache recovered nothing"
	local fpid; fpid=$(cat "$RUN/1-filed.pid")

	echo "--- $1: down leaves the hand-started cache running: filed behind it too"
	expect_exit 1 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
	cat "$DIR/out" "$DIR/err"
	alive "$fpid" || fail "$1: down stopped filed behind a cache left running"
	grep -q "filed on port 1 is not stopped" "$DIR/err" ||
		fail "$1: down did not say why filed runs: $(cat "$DIR/err")"
	"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 || fail "$1: down removed the segment"

	echo "--- $1: the cache stopped (it writes back): down removes the rest"
	kill -TERM "$hand"
	for _ in $(seq 400); do alive "$hand" || break; sleep 0.05; done
	alive "$hand" && fail "$1: the hand-started cache does not stop"
	expect_exit 0 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
	"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "$1: segment left after down"

	printf 'segment %s ports=16\npeer filed port=1 dir=%s\npeer vlmcd port=2 blocker-port=1 volume=vol:8M object-size=1M\n' \
		"$SEG" "$data" > "$DIR/plain.txt"
	"$BIN/xseg" up "$DIR/plain.txt" --run-dir "$RUN" > "$DIR/up.out" 2>&1 ||
		fail "up: $(cat "$DIR/up.out")"
	bench read
	expect_exit 0 "$BIN/xseg" down "$DIR/plain.txt" --run-dir "$RUN"
}

cat > "$DIR/plugged.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed  port=1 dir=$DIR/data-plugged stop-timeout=3
peer vlmcd  port=2 blocker-port=1 volume=vol:8M object-size=1M
peer cached port=3 blocker-port=1 $cache persist=$DIR/plugged.persist plug=1
EOT
one_case plugged

cat > "$DIR/behind.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed  port=1 dir=$DIR/data-behind stop-timeout=3
peer cached port=3 blocker-port=1 $cache persist=$DIR/behind.persist
peer vlmcd  port=2 blocker-port=3 volume=vol:8M object-size=1M
EOT
one_case behind
echo "ok"
