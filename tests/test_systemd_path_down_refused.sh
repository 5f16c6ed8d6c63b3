#!/usr/bin/env bash
# xseg-path@.service leaves alone what `xseg down` refused to stop. The
# unit as installed, run the way systemd runs it: ExecStart (`xseg up`),
# at the stop ExecStop (`xseg down`), then the unit's KillMode= applied to
# what is left of the processes ExecStart started (control-group, the
# default: SIGTERM to each). Path: filed, vlmcd; a write-back cached
# plugged in front of filed by hand (not in the file, not in the unit)
# holds dirty data. down refuses to stop filed behind it (exit 1). Under
# KillMode=control-group systemd then SIGTERMed filed anyway: it served on
# for its stop-timeout and stopped, and the cache's acknowledged data had
# nowhere to go (before the fix). Now filed is left running; once the
# cache is unplugged (written back) and stopped, down removes everything
# and every byte reads back from filed (bench-xseg --verify full).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdpathdown
. tests/lib.sh
. tests/up_lib.sh
BUILD=${BUILD:-build}
command -v python3 > /dev/null || fail "python3 is needed"
P=$DIR/prefix
make -s --no-print-directory BUILD="$BUILD" SANITIZE="${SANITIZE:-}" PREFIX="$P" install \
	> "$DIR/install.log" 2>&1 || { cat "$DIR/install.log"; fail "make install PREFIX=$P failed"; }
unit=$P/lib/systemd/system/xseg-path@.service
NAME=$SEG
mkdir -p "$DIR/etc"
# filed gives up its own stop 3 s after a SIGTERM with a cache in front
cat > "$DIR/etc/$NAME.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data stop-timeout=3
peer vlmcd port=2 blocker-port=1 volume=vol:16M object-size=1M
EOT
cp "$DIR/etc/$NAME.path" "$DIR/$NAME.path"   # for up_lib.sh's cleanup

# unit_cmd KEY: the unit's KEY= line for instance NAME into $argv, the path
# file from $DIR/etc, the run directory the test's own.
unit_cmd() {
	local line
	line=$(sed -n "s/^$1=//p" "$unit" | head -1)
	[ -n "$line" ] || fail "xseg-path@ has no $1="
	line=${line//%i/$NAME}
	line=${line//\/etc\/xseg\//$DIR/etc/}
	eval "argv=($line --run-dir $RUN)"
}
killmode=$(sed -n 's/^KillMode=//p' "$unit")
killmode=${killmode:-control-group}

unit_cmd ExecStart
"${argv[@]}" > "$DIR/up.out" 2>&1 || fail "ExecStart '${argv[*]}': $(cat "$DIR/up.out")"
started=$(cat "$RUN"/*.pid)   # the unit's control group: what ExecStart left running
fpid=$(cat "$RUN/1-filed.pid")
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M --object-size 1M \
	--write-policy writeback --dirty-high 100 --dirty-low 100 --daemon \
	--pidfile "$DIR/cached.pid" 2>> "$DIR/cached.log" || fail "cached did not start"
cpid=$(cat "$DIR/cached.pid")
pids+=($cpid)
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > /dev/null || fail "plug"
bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size 16M --block-size 64K --iodepth 8 --seed 5 --verify full \
		--timeout 30 --json > "$DIR/$1.out" 2> "$DIR/$1.err" ||
		fail "$1: $(tail -2 "$DIR/$1.err")"
}
bench write
d=$(peer_stat 3 dirty_bytes)
[ "$d" -gt 0 ] || fail "nothing dirty in the cache: the test would prove nothing"
echo "the hand-plugged cache holds $d dirty bytes"

echo "--- systemctl stop: ExecStop, then KillMode=$killmode"
unit_cmd ExecStop
"${argv[@]}" > "$DIR/down.out" 2>&1; rc=$?
[ $rc -eq 1 ] || fail "ExecStop (xseg down) exited $rc behind a live dirty cache: $(cat "$DIR/down.out")"
alive "$fpid" || fail "xseg down stopped filed behind the live dirty cache"
case $killmode in
control-group)
	for p in $started; do alive "$p" && kill -TERM "$p"; done ;;
process|none) ;;   # the main process (xseg up) is long gone
*) fail "KillMode=$killmode: this test does not know it" ;;
esac
sleep 4   # past filed's stop-timeout
alive "$fpid" ||
	fail "KillMode=$killmode: systemd SIGTERMed filed, which xseg down kept for the live cache on port 3 holding $(peer_stat 3 dirty_bytes) dirty bytes: they have nowhere to go"
"$BIN/xseg" unplug --segment "$SEG" --via 3 > /dev/null || fail "unplug (write-back to filed)"
kill -TERM "$cpid"
for _ in $(seq 200); do alive "$cpid" || break; sleep 0.05; done
unit_cmd ExecStop
"${argv[@]}" > "$DIR/down.out" 2>&1 || fail "xseg down by hand after the cache left: $(cat "$DIR/down.out")"
[ -e "/dev/shm/$SEG" ] && fail "down left the segment"

echo "--- every byte from filed alone"
"$BIN/xseg" up "$DIR/$NAME.path" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
bench read
"$BIN/xseg" down "$DIR/$NAME.path" --run-dir "$RUN" > /dev/null || fail "down"
echo "ok: what xseg down kept stayed; every byte reached filed"
