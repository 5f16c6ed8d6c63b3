#!/usr/bin/env bash
# A write-back cached without --persist that lost its dirty data at a
# stop keeps the path failing closed across the units' stop and start.
# The per-peer units run as systemd would (systemd_lib.sh): filed, cached
# (plugged in front of filed), vlmcd; 16M written leave cached dirty;
# filed is killed (a blocker crash); the units stop in reverse: cached
# gives up its write-back (exit 1) and the data is gone, its port marked
# dirty. Then the segment unit's stop and start, and the peer units
# start again. Before the fix the segment was removed and made anew, the
# mark with it: cached started clean, and 4096 of 4096 reads through vlmcd
# came back older than what was acknowledged, with no error. Now the
# segment is kept and taken again: cached refuses the marked port (exit 1,
# a failed unit to see) and every read fails (EIO), none older.
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdlostcache
. tests/lib.sh
BUILD=${BUILD:-build}
mkdir -p "$DIR/data"
UNIT_ENV="XSEG_SEGMENT_ARGS=\"--ports 16 --requests 1024 --heap 128M\"
FILED_ARGS=\"--port 1 --dir $DIR/data --threads 2\"
CACHED_ARGS=\"--port 3 --blocker-port 1 --cache-size 64M --write-policy writeback --threads 2 --stop-timeout 2\"
CACHED_PLUG=\"--port 1 --via 3\"
VLMCD_ARGS=\"--port 2 --blocker-port 1 --volume vol1:64M\""
. tests/systemd_lib.sh

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 16M --block-size 4K --iodepth 16 --seed 9 --verify full "$@" \
		> "$DIR/bench.log" 2>&1
}
segment_unit() {   # segment_unit ExecStart|ExecStop: its exit status in $rc
	unit_cmd "xseg-segment@$SEG.service" "$1" || fail "xseg-segment@ has no $1"
	"${argv[@]}" >> "$DIR/segment-unit.out" 2>&1; rc=$?
}

segment_unit ExecStart
[ $rc -eq 0 ] || fail "xseg-segment@'s ExecStart exited $rc: $(cat "$DIR/segment-unit.out")"
for k in filed cached vlmcd; do unit_start $k; done
bench --op write --pattern rand || { cat "$DIR/bench.log"; fail "bench write"; }
dirty=$(peer_stat 3 dirty_bytes) || fail "xseg stats of cached"
[ "$dirty" -gt 0 ] || fail "cached holds no dirty bytes after the writes"
echo "cached holds $dirty dirty bytes"

echo "--- filed killed; the units stop in reverse"
kill -KILL "${pid_of[filed]}"
wait "${pid_of[filed]}" 2>/dev/null
unit_stop vlmcd
unit_stop cached
[ $rc -ne 0 ] || fail "cached exited 0 with its blocker dead and $dirty bytes dirty"
segment_unit ExecStop
echo "cached exited 1; the segment unit's stop exited $rc"

echo "--- the units start again"
segment_unit ExecStart
[ $rc -eq 0 ] || fail "xseg-segment@'s ExecStart exited $rc: $(cat "$DIR/segment-unit.out")"
unit_start filed
if unit_try_start cached; then
	echo "cached started (clean, plugged)"
else
	echo "cached failed: exit $rc"
fi
unit_start vlmcd
bench --op read --pattern rand
res=$(grep -E '^ *requests' "$DIR/bench.log")
case $res in
*" 0 corrupted") ;;
*) fail "after the units' stop and start, reads of acknowledged writes came back older with no error: $res" ;;
esac
case $res in
*"4096 of 4096 answered, 4096 failed"*) ;;
*) fail "the lost data's reads did not all fail closed: $res" ;;
esac
echo "ok: the lost cache's port kept failing closed: $res"
