#!/usr/bin/env bash
# A cached unit whose --persist file holds dirty data guards its plug's
# port before it starts, as `xseg up` does. cached --persist dirty (16M
# written, then SIGKILL) and the segment gone (a reboot); the operator's
# env changed cached's --cache-size, so cached refuses its persist file
# (exit 2). The per-peer units then start as systemd would (systemd_lib.sh;
# filed, cached, vlmcd enabled: ExecStartPre, each started after its
# After=, not where a unit it Requires= failed). vlmcd, only After=
# cached, starts anyway. Before the fix it sent straight to filed, which
# lacks what the file holds: reads of acknowledged writes came back older
# with no error (4096 of 4096), and a write then would be overwritten once
# cached replays the file. Now port 1 fails closed (EIO: no byte older);
# with the env put right, cached recovers the file, takes the mark over
# and is plugged, and every byte reads back (bench-xseg --verify full).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdcacheref
. tests/lib.sh
BUILD=${BUILD:-build}
mkdir -p "$DIR/data"
persist=$DIR/cache.persist
UNIT_ENV="XSEG_SEGMENT_ARGS=\"--ports 16 --requests 1024 --heap 128M\"
FILED_ARGS=\"--port 1 --dir $DIR/data --threads 2\"
CACHED_ARGS=\"--port 3 --blocker-port 1 --cache-size 128M --write-policy writeback --threads 2 --persist $persist\"
CACHED_PLUG=\"--port 1 --via 3\"
VLMCD_ARGS=\"--port 2 --blocker-port 1 --volume vol1:64M\""
ENABLED="filed cached vlmcd"
. tests/systemd_lib.sh

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 16M --block-size 4K --iodepth 16 --seed 13 --verify full "$@" \
		> "$DIR/bench.log" 2>&1
}

echo "--- before: cached (64M) dirty in its persist file, killed; segment gone"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M > /dev/null || fail "xseg create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed0.log" & f0=$!; pids+=($f0)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M --write-policy writeback \
	--persist "$persist" 2> "$DIR/cached0.log" & c0=$!; pids+=($c0)
wait_bound 3
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 > /dev/null || fail "xseg plug"
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol1:64M 2> "$DIR/vlmcd0.log" & v0=$!
pids+=($v0)
wait_bound 2
bench --op write --pattern rand || { cat "$DIR/bench.log"; fail "bench write"; }
dirty=$(peer_stat 3 dirty_bytes) || fail "xseg stats of cached"
[ "$dirty" -gt 0 ] || fail "cached holds no dirty bytes after the writes"
kill -KILL $c0; kill -TERM $v0 $f0; wait $c0 $v0 $f0 2>/dev/null
"$BIN/xseg" destroy --segment "$SEG" || fail "xseg destroy"
"$BIN/cached" --persist-inspect "$persist" --json > "$DIR/inspect.json" || fail "persist-inspect"
grep -q "\"dirty_bytes\":$dirty," "$DIR/inspect.json" ||
	fail "the persist file does not hold the $dirty dirty bytes: $(cat "$DIR/inspect.json")"
echo "$persist holds $dirty dirty bytes"

echo "--- the units start; cached (now 128M) refuses its file"
declare -A active
start_unit() {   # start_unit K: as systemd would, once its dependencies are settled
	local k=$1 r
	for r in $(unit_requires "$k"); do
		if [ -z "${active[$r]:-}" ]; then
			echo "$k: not started, $r (Required) failed"
			return 1
		fi
	done
	if unit_try_start "$k"; then active[$k]=1; else echo "$k: start failed, exit $rc"; return 1; fi
}
unit_cmd "xseg-segment@$SEG.service" ExecStart || fail "xseg-segment@ has no ExecStart"
"${argv[@]}" > /dev/null || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
start_unit filed || fail "filed did not start"
start_unit cached && fail "cached started on a persist file of another cache size"
[ "$rc" = 2 ] || fail "cached refused its file with exit $rc, expected 2"
start_unit vlmcd || fail "vlmcd did not start"
bench --op read --pattern rand
grep -Eq '^ *requests .* 0 corrupted' "$DIR/bench.log" ||
	fail "with cached refused, reads through vlmcd came back older than acknowledged: $(grep -E '^ *requests' "$DIR/bench.log")"
grep -Eq '^ *requests +4096 of 4096 answered, 4096 failed' "$DIR/bench.log" ||
	fail "with cached refused, reads did not all fail closed: $(grep -E '^ *requests' "$DIR/bench.log")"
echo "reads through vlmcd fail closed: $(grep -E '^ *requests' "$DIR/bench.log")"

echo "--- env put right, systemctl start xseg-cached: it recovers its file under the running vlmcd"
CACHED_ARGS=${CACHED_ARGS/--cache-size 128M/--cache-size 64M}
start_unit cached || fail "cached did not start on its own file"
bench --op read --pattern rand || { cat "$DIR/bench.log"; fail "the acknowledged writes did not read back"; }
for k in vlmcd cached filed; do
	unit_stop $k
	[ $rc -eq 0 ] || fail "$k exited $rc on SIGTERM"
done
unit_cmd "xseg-segment@$SEG.service" ExecStop
"${argv[@]}" || fail "xseg-segment@'s ExecStop '${argv[*]}' exited $?"
echo "ok: port 1 failed closed while cached refused; every byte back from the persist file"
