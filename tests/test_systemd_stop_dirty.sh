#!/usr/bin/env bash
# xseg-segment@'s stop keeps a segment whose port is marked dirty. The
# per-peer units of tools/systemd/ run as systemd would (systemd_lib.sh):
# filed, cached (--persist, plugged in front of filed), vlmcd; writes
# leave cached dirty; filed is killed (a blocker crash), then the units
# stop in reverse: cached cannot write back, gives up (exit 1: a failed
# unit) and leaves its port marked dirty, the fail-closed mark. The
# segment unit's ExecStop runs after it, as systemd runs it after every
# peer whatever their result: it must keep the segment (exit 1, naming
# the port), as `xseg down` does (before the fix it removed it, the mark
# with it; without --persist the path made again then served filed's
# older data with no error: test_systemd_lost_cache.sh).
# Then the units start again: the segment unit takes the kept segment
# as it is (`xseg create --reuse`; it failed, the segment existing, before),
# filed, and cached recovers its persist file on it (taking the mark over)
# and is plugged again; every byte reads back (bench-xseg --verify full);
# stopped again, the segment goes.
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdstopdirty
. tests/lib.sh
BUILD=${BUILD:-build}
mkdir -p "$DIR/data"
UNIT_ENV="XSEG_SEGMENT_ARGS=\"--ports 16 --requests 1024 --heap 128M\"
FILED_ARGS=\"--port 1 --dir $DIR/data --threads 2\"
CACHED_ARGS=\"--port 3 --blocker-port 1 --cache-size 64M --write-policy writeback --threads 2 --persist $DIR/cache.persist --stop-timeout 2\"
CACHED_PLUG=\"--port 1 --via 3\"
VLMCD_ARGS=\"--port 2 --blocker-port 1 --volume vol1:64M\""
. tests/systemd_lib.sh

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 16M --block-size 4K --iodepth 16 --seed 11 --verify full "$@" \
		> "$DIR/bench.log" 2>&1 || { cat "$DIR/bench.log"; fail "bench-xseg $* failed"; }
}

echo "--- start: segment, filed, cached (plugged), vlmcd"
unit_cmd "xseg-segment@$SEG.service" ExecStart || fail "xseg-segment@ has no ExecStart"
"${argv[@]}" > /dev/null || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
for k in filed cached vlmcd; do unit_start $k; done
bench --op write --pattern rand
dirty=$(peer_stat 3 dirty_bytes) || fail "xseg stats of cached"
[ "$dirty" -gt 0 ] || fail "cached holds no dirty bytes after the writes"
echo "cached holds $dirty dirty bytes"

echo "--- filed killed; stop in reverse: cached gives up"
kill -KILL "${pid_of[filed]}"
wait "${pid_of[filed]}" 2>/dev/null
unit_stop vlmcd
[ $rc -eq 0 ] || fail "vlmcd exited $rc on SIGTERM"
unit_stop cached
[ $rc -ne 0 ] || fail "cached exited 0 on SIGTERM with its blocker dead and $dirty bytes dirty"
marked=$(port_info 3 dirty_bytes)
[ "$marked" != 0 ] || fail "cached gave up but port 3 is not marked dirty"
echo "cached exited $rc, port 3 marked with $marked dirty bytes"

echo "--- the segment unit's ExecStop"
unit_cmd "xseg-segment@$SEG.service" ExecStop || fail "xseg-segment@ has no ExecStop"
"${argv[@]}" > "$DIR/stop.out" 2> "$DIR/stop.err"; src=$?
[ -e "/dev/shm/$SEG" ] ||
	fail "xseg-segment@'s ExecStop '${argv[*]}' (exit $src) removed the segment with port 3 marked dirty ($marked bytes): the mark is gone and a path made again serves older data"
[ $src -ne 0 ] || fail "ExecStop kept the segment but exited 0 (systemd would not show it)"
grep -q "port 3" "$DIR/stop.err" || fail "ExecStop does not name port 3: $(cat "$DIR/stop.err")"
echo "kept: $(cat "$DIR/stop.err")"

echo "--- systemctl start again: the segment unit reuses the kept segment"
unit_cmd "xseg-segment@$SEG.service" ExecStart
"${argv[@]}" > "$DIR/start.out" 2> "$DIR/start.err" ||
	fail "xseg-segment@'s ExecStart '${argv[*]}' exited $? on the kept segment: $(cat "$DIR/start.err")"
[ "$(port_info 3 dirty_bytes)" = "$marked" ] || fail "the start lost port 3's mark"
unit_start filed
unit_start cached
unit_start vlmcd
"$BIN/xseg" create --segment "$SEG" --reuse > /dev/null 2> "$DIR/reuse.err" &&
	fail "xseg create --reuse took a segment its peers serve"
grep -q "served by pid" "$DIR/reuse.err" || fail "create --reuse of a served segment: $(cat "$DIR/reuse.err")"
bench --op read --pattern rand
unit_stop vlmcd; [ $rc -eq 0 ] || fail "vlmcd exited $rc"
unit_stop cached; [ $rc -eq 0 ] || fail "cached exited $rc after recovering"
unit_stop filed; [ $rc -eq 0 ] || fail "filed exited $rc"
unit_cmd "xseg-segment@$SEG.service" ExecStop
"${argv[@]}" || fail "xseg-segment@'s ExecStop '${argv[*]}' exited $? with all stopped clean"
[ -e "/dev/shm/$SEG" ] && fail "the segment unit's ExecStop left an unused segment"
echo "ok: the segment kept with cached's mark; every byte back from its persist file"
