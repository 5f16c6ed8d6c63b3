#!/usr/bin/env bash
# A path file whose peer sends to a port a later line serves: a cached
# with blocker-port=1 listed before the filed on port 1 was accepted (only
# plug= was checked), and down, stopping in reverse line order, stopped
# filed first while the cache still held dirty data. Now such a file exits
# 2 naming FILE:LINE of the peer and the key, for every key that names a
# port the peer sends to (blocker-port, mirror-port, forward, target-port),
# with up, down and status alike; the same peers in start order are fine.
set -u
SEG_PREFIX=xseg-up-order
. "$(dirname "$0")/lib.sh"

f=$DIR/p.path
# the old build started what it accepted: whatever runs goes down
. "$(dirname "$0")/up_lib.sh"
# refused PEER-LINE-BEFORE PEER-LINE-AFTER KEY: line 2 named, with KEY
refused() {
	printf 'segment %s ports=16\n%s\n%s\n' "$SEG" "$1" "$2" > "$f"
	for c in up down status; do
		bad_arg "$f:2:" "$BIN/xseg" "$c" "$f" --run-dir "$DIR/run"
		grep -q -- "$3" "$DIR/err" || fail "$c: '$3' not named: $(cat "$DIR/err")"
	done
	# in start order: read fine (status says not running: exit 1)
	printf 'segment %s ports=16\n%s\n%s\n' "$SEG" "$2" "$1" > "$f"
	expect_exit 1 "$BIN/xseg" status "$f" --run-dir "$DIR/run"
}
refused "peer cached port=3 blocker-port=1 cache-size=16M" "peer filed port=1 dir=$DIR/data" blocker-port=1
refused "peer vlmcd port=2 blocker-port=3 volume=v:8M" "peer cached port=3-4 blocker-port=1 cache-size=16M" blocker-port=3
refused "peer cached port=3 blocker-port=5 cache-size=16M mirror-port=2" "peer cached port=2 blocker-port=5 cache-size=16M replica" mirror-port=2
refused "peer nulld port=4 forward=1" "peer nulld port=1" forward=1
refused "peer nbdd port=6 target-port=2 unix=/tmp/x" "peer vlmcd port=2 lanes=2 blocker-port=1 volume=v:8M" target-port=2
# a port no line serves is someone else's: not refused
printf 'segment %s ports=16\npeer vlmcd port=2 blocker-port=9 volume=v:8M\n' "$SEG" > "$f"
expect_exit 1 "$BIN/xseg" status "$f" --run-dir "$DIR/run"
[ -e /dev/shm/"$SEG" ] && fail "a bad file made the segment"
echo "ok"
