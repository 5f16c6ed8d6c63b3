#!/usr/bin/env bash
# A pidfile in the run directory that names a live process that is not
# the peer (the peer died without removing it, and its pid was reused:
# after a reboot with a kept run directory, or on a long-lived host). It
# made up fail (the peer refuses a pidfile naming a live pid), the failed
# up left the segment behind taking the stranger for a peer "left
# running", and every later up and down failed. Now such a pidfile is
# stale: removed, said, and the stranger left alone (never signalled),
# also when it runs the same program for another path (it is ours only
# when it serves our port or was started with our --pidfile).
set -u
SEG_PREFIX=xseg-stale-pid
. "$(dirname "$0")/lib.sh"

RUN=$DIR/run
path=$DIR/p.path
down_all() {
	"$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10 > /dev/null 2>&1
	for f in "$RUN"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
	cleanup
	"$BIN/xseg" destroy --segment "$SEG-other" > /dev/null 2>&1
}
trap down_all EXIT
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]; }

mkdir -p "$RUN" "$DIR/data"; chmod 700 "$RUN"
printf 'segment %s ports=16\npeer filed port=1 dir=%s\npeer nulld port=2\n' "$SEG" "$DIR/data" > "$path"
sleep 300 & other=$!; pids+=($other)

echo "--- up with 1-filed.pid naming a live stranger"
echo "$other" > "$RUN/1-filed.pid"
expect_exit 0 timeout 60 "$BIN/xseg" up "$path" --run-dir "$RUN"
grep -q "named pid $other, which is not filed (a stale pidfile" "$DIR/err" ||
	fail "up did not say the pidfile was stale: $(cat "$DIR/err")"
[ "$(cat "$RUN/1-filed.pid")" != "$other" ] || fail "filed's pidfile still names pid $other"
alive "$other" || fail "up signalled the stranger"

echo "--- down with 2-nulld.pid naming a live stranger (nulld killed)"
npid=$(cat "$RUN/2-nulld.pid")
kill -KILL "$npid"
for _ in $(seq 100); do alive "$npid" || break; sleep 0.05; done
echo "$other" > "$RUN/2-nulld.pid"
expect_exit 0 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
grep -q "named pid $other, which is not nulld (a stale pidfile" "$DIR/err" ||
	fail "down did not say the pidfile was stale: $(cat "$DIR/err")"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "down left the segment"
alive "$other" || fail "down signalled the stranger"
[ -e "$RUN/2-nulld.pid" ] && fail "the stale pidfile is still there"

echo "--- down with 2-nulld.pid naming a live nulld of another segment"
# the same program, another path's: the program's name alone took it for
# ours, and down signalled it
"$BIN/xseg" create --segment "$SEG-other" --ports 4 > /dev/null || fail "create other"
"$BIN/nulld" --segment "$SEG-other" --port 2 2> "$DIR/other.log" & onull=$!
pids+=($onull)
expect_exit 0 timeout 60 "$BIN/xseg" up "$path" --run-dir "$RUN"
npid=$(cat "$RUN/2-nulld.pid")
kill -KILL "$npid"
for _ in $(seq 100); do alive "$npid" || break; sleep 0.05; done
echo "$onull" > "$RUN/2-nulld.pid"
expect_exit 0 timeout 60 "$BIN/xseg" down "$path" --run-dir "$RUN" --timeout 10
alive "$onull" || fail "down signalled another segment's nulld (its pid in our pidfile)"
grep -q "named pid $onull, which is not nulld (a stale pidfile" "$DIR/err" ||
	fail "down did not say the pidfile was stale: $(cat "$DIR/err")"
kill -TERM "$onull"; wait "$onull"
"$BIN/xseg" destroy --segment "$SEG-other" > /dev/null 2>&1
echo "ok"
