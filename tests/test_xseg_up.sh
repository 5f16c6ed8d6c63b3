#!/usr/bin/env bash
# xseg up, status and down of a path file (issue 25): filed, vlmcd and
# cached (write-back, plugged in front of filed) brought up from a file;
# bench-xseg writes verified data through the path; status says all serve;
# down stops them in reverse order, cached writing back every dirty byte,
# and removes the segment; then a fresh filed (with a vlmcd, no cache) on
# the same directory serves every byte read back with the same seed. A
# file whose second peer fails makes up exit 1 with that peer's message,
# leaving nothing running and no segment, and so does one that never
# serves (--timeout); bad files exit 2 naming FILE:LINE.
# Run by tests/run-tests.sh (BIN = the build's bin directory).
set -u
SEG_PREFIX=xseg-up
. "$(dirname "$0")/lib.sh"

RUN=$DIR/run
# whatever a failure left running goes down with the rest
down_all() {
	for f in "$DIR"/*.path; do
		[ -f "$f" ] && "$BIN/xseg" down "$f" --run-dir "$RUN" --timeout 30 > /dev/null 2>&1
	done
	cleanup
}
trap down_all EXIT

# up FILE: xseg up must return 0 and let go of the caller's stdout and
# stderr (a pipe here, as in out=$(xseg up ...)) within 60 s.
up() {
	{ "$BIN/xseg" up "$1" --run-dir "$RUN" 2>&1; echo "exit $?"; } |
		{ timeout 60 cat > "$DIR/up.out"; echo $? > "$DIR/up.rc"; }
	[ "$(cat "$DIR/up.rc")" = 0 ] ||
		fail "xseg up $1 kept its caller's output open: $(cat "$DIR/up.out")"
	[ "$(tail -1 "$DIR/up.out")" = "exit 0" ] || fail "xseg up $1: $(cat "$DIR/up.out")"
}

# pids_of: the pids in the run directory's pidfiles
pids_of() { cat "$RUN"/*.pid 2>/dev/null; }

# all_gone PID...: none of them runs, no pidfile is left, no segment.
all_gone() {
	for p in "$@"; do   # a zombie waiting for init to reap it is gone
		kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p" | cut -c1)" != Z ] &&
			fail "pid $p still runs: $(ps -o stat=,cmd= -p "$p")"
	done
	ls "$RUN"/*.pid > /dev/null 2>&1 && fail "pidfiles left: $(ls "$RUN")"
	"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "segment $SEG is still there"
	return 0
}

echo "--- bad files: exit 2, one line naming FILE:LINE"
bad=$DIR/bad.txt
printf 'segment %s ports=16 colour=red\npeer filed port=1\n' "$SEG" > "$bad"
bad_arg "$bad:1:" "$BIN/xseg" up "$bad"
grep -q colour "$DIR/err" || fail "unknown segment key not named: $(cat "$DIR/err")"
printf '# a path\nsegment %s\n\npeer filed dir=%s\n' "$SEG" "$DIR/data" > "$bad"
bad_arg "$bad:4:" "$BIN/xseg" up "$bad"
grep -q port "$DIR/err" || fail "a missing port not named: $(cat "$DIR/err")"
printf 'segment %s\npeer filed port=1\nfrobnicate the segment\n' "$SEG" > "$bad"
bad_arg "$bad:3:" "$BIN/xseg" up "$bad"
grep -q frobnicate "$DIR/err" || fail "a garbage line not named: $(cat "$DIR/err")"
printf 'segment %s\npeer filed port=1\npeer vlmcd port=1 blocker-port=1\n' "$SEG" > "$bad"
bad_arg "$bad:3:" "$BIN/xseg" up "$bad"
printf 'segment %s ports=8\npeer filed port=9\n' "$SEG" > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" up "$bad"
printf 'segment %s\npeer filed port=1 pidfile=/tmp/x\n' "$SEG" > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" status "$bad"
printf 'segment %s\npeer cached port=3 blocker-port=1 plug=1\npeer filed port=1\n' "$SEG" > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" down "$bad"
printf 'segment %s\npeer no-such-program-%s port=1\n' "$SEG" $$ > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" up "$bad"
printf 'segment %s\npeer filed port=1 dir=data\n' "$SEG" > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" up "$bad"
grep -q 'relative path' "$DIR/err" || fail "a relative dir= not refused: $(cat "$DIR/err")"
printf 'segment %s\npeer filed port=1 dir=/tmp\npeer cached port=3 blocker-port=1 persist=c.pf plug=1\n' "$SEG" > "$bad"
bad_arg "$bad:3:" "$BIN/xseg" up "$bad"
printf 'peer filed port=1\n' > "$bad"
bad_arg "$bad:1:" "$BIN/xseg" up "$bad"
bad_arg "$DIR/no-such-file" "$BIN/xseg" up "$DIR/no-such-file"
bad_arg "FILE" "$BIN/xseg" up
bad_arg "--segment" "$BIN/xseg" up "$bad" --segment "$SEG"
bad_arg "/dev/zero" "$BIN/xseg" status /dev/zero
[ -e /dev/shm/"$SEG" ] && fail "a bad file made the segment"

echo "--- up: filed, vlmcd, cached write-back plugged in front of filed"
path=$DIR/path.path
cat > "$path" <<EOT
# the default path, from a file
segment $SEG ports=16 requests=1024 heap=128M
peer filed  port=1 dir=$DIR/data threads=2     # objects as files
peer vlmcd  port=2 blocker-port=1 volume=vol1:64M
peer cached port=3 blocker-port=1 cache-size=64M write-policy=writeback plug=1 threads=2
EOT
up "$path"
grep -q "3 peers serve" "$DIR/up.out" || fail "xseg up: $(cat "$DIR/up.out")"
started=$(pids_of)
[ "$(echo $started | wc -w)" = 3 ] || fail "expected 3 pidfiles in $RUN: $(ls "$RUN")"
expect_exit 0 "$BIN/xseg" status "$path" --run-dir "$RUN"
[ "$(grep -c ' serving' "$DIR/out")" = 3 ] || fail "xseg status: $(cat "$DIR/out")"
grep -q "plugged in front of port 1" "$DIR/out" || fail "xseg status: $(cat "$DIR/out")"
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":1,[^}]*"next_hop":3' ||
	fail "port 1 is not routed to cached: $("$BIN/xseg" info --segment "$SEG")"

echo "--- up again: refused, naming status and down"
expect_exit 1 "$BIN/xseg" up "$path" --run-dir "$RUN"
grep -q "xseg status" "$DIR/err" && grep -q "xseg down" "$DIR/err" ||
	fail "up of a running path: $(cat "$DIR/err")"

echo "--- verified writes through the path"
bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 32M --block-size 4K --iodepth 16 --seed 1 --verify full "$@" \
		> "$DIR/bench.log" 2>&1 || { cat "$DIR/bench.log"; fail "bench-xseg $* failed"; }
}
bench --op write --pattern rand
"$BIN/xseg" stats --segment "$SEG" --port 3 --json > "$DIR/stats.json" || fail "xseg stats"
python3 -c 'import json,sys; s = json.load(open(sys.argv[1])); assert s["write_bytes"] >= 32 << 20, s' \
	"$DIR/stats.json" || fail "the writes did not go through cached: $(cat "$DIR/stats.json")"
echo "cached: $(python3 -c 'import json,sys; s = json.load(open(sys.argv[1])); print("write_bytes", s["write_bytes"], "dirty_bytes", s["dirty_bytes"], "blocker_write_bytes", s["blocker_write_bytes"])' "$DIR/stats.json")"

echo "--- down: reverse order, cached writes back, segment removed"
expect_exit 0 timeout 200 "$BIN/xseg" down "$path" --run-dir "$RUN"
grep -n "stopping" "$DIR/out" | tr '\n' ' ' | grep -q "cached.*vlmcd.*filed" ||
	fail "down did not stop cached, vlmcd, filed in that order: $(cat "$DIR/out")"
all_gone $started
expect_exit 1 "$BIN/xseg" status "$path" --run-dir "$RUN"
[ "$(grep -c 'not running' "$DIR/out")" = 3 ] || fail "status after down: $(cat "$DIR/out")"
expect_exit 0 "$BIN/xseg" down "$path" --run-dir "$RUN"   # nothing runs: fine

echo "--- every byte straight from a fresh filed"
plain=$DIR/plain.path
cat > "$plain" <<EOT
segment $SEG
peer filed port=1 dir=$DIR/data
peer vlmcd port=2 blocker-port=1 volume=vol1:64M
EOT
up "$plain"
bench --op read --pattern rand
expect_exit 0 "$BIN/xseg" down "$plain" --run-dir "$RUN"

echo "--- a second peer that fails: up exits 1 with its message, stops the first"
failing=$DIR/failing.path
cat > "$failing" <<EOT
segment $SEG
peer filed  port=1 dir=$DIR/data
peer vlmcd  port=2 blocker-port=1 volume=vol1:64M no-such-option=$$
peer cached port=3 blocker-port=1 cache-size=16M plug=1
EOT
expect_exit 1 timeout 200 "$BIN/xseg" up "$failing" --run-dir "$RUN"
grep -q "vlmcd" "$DIR/err" && grep -q "no-such-option" "$DIR/err" ||
	fail "up did not give vlmcd's message: $(cat "$DIR/err")"
fpid=$(sed -n 's/.*filed on port 1 serves (pid \([0-9]*\)).*/\1/p' "$DIR/out")
[ -n "$fpid" ] || fail "filed never served: $(cat "$DIR/out" "$DIR/err")"
grep -q cached "$DIR/out" && fail "cached was started after vlmcd failed: $(cat "$DIR/out")"
all_gone "$fpid"

echo "--- a peer that serves but cannot start its work: the same"
cat > "$failing" <<EOT
segment $SEG
peer filed  port=1 dir=$DIR/data
peer cached port=3 blocker-port=1 cache-size=1K
EOT
expect_exit 1 timeout 200 "$BIN/xseg" up "$failing" --run-dir "$RUN"
grep -q "cached" "$DIR/err" && grep -q -- "cache-size" "$DIR/err" ||
	fail "up did not give cached's message: $(cat "$DIR/err")"
fpid=$(sed -n 's/.*filed on port 1 serves (pid \([0-9]*\)).*/\1/p' "$DIR/out")
all_gone "$fpid"

echo "--- a peer that never answers: up gives up after --timeout, undoes the rest"
mkdir -p "$DIR/bin"
printf '#!/bin/sh\necho "hang-peer: never serving"\nexec sleep 99%s\n' $$ > "$DIR/bin/hang-peer"
chmod +x "$DIR/bin/hang-peer"
cat > "$failing" <<EOT
segment $SEG
peer filed     port=1 dir=$DIR/data
peer hang-peer port=2
EOT
PATH=$DIR/bin:$PATH expect_exit 1 timeout 60 "$BIN/xseg" up "$failing" --run-dir "$RUN" --timeout 2
grep -q "hang-peer.*no answer in time" "$DIR/err" && grep -q "never serving" "$DIR/err" ||
	fail "up of a peer that never serves: $(cat "$DIR/err")"
fpid=$(sed -n 's/.*filed on port 1 serves (pid \([0-9]*\)).*/\1/p' "$DIR/out")
all_gone "$fpid"
pgrep -f "sleep 99$$" > /dev/null && fail "the peer that never served still runs: $(pgrep -af "sleep 99$$")"

echo "ok: xseg up, status, down; verified data on filed after down; failed starts undone"
