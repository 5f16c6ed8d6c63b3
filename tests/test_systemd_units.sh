#!/usr/bin/env bash
# The per-peer units of tools/systemd/, as installed, run the way systemd
# runs them (no systemd needed; this machine's may not be PID 1): each
# ExecStart line with %i the segment and $VARs from an EnvironmentFile,
# started in After= order once the one before said READY=1 (Type=notify),
# cached's ExecStartPost plugging it; writes through vlmcd leave cached
# dirty; then SIGTERM to each in the reverse order, each waited for and
# exiting 0, the segment unit's ExecStop last. A fresh filed then serves
# every byte: the stop order drained the cache into the blocker.
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdunits
. tests/lib.sh
BUILD=${BUILD:-build}
mkdir -p "$DIR/data"
UNIT_ENV="XSEG_SEGMENT_ARGS=\"--ports 16 --requests 1024 --heap 128M\"
FILED_ARGS=\"--port 1 --dir $DIR/data --threads 2\"
CACHED_ARGS=\"--port 3 --blocker-port 1 --cache-size 64M --write-policy writeback --threads 2\"
CACHED_PLUG=\"--port 1 --via 3\"
VLMCD_ARGS=\"--port 2 --blocker-port 1 --volume vol1:64M\""
. tests/systemd_lib.sh   # install, env, notify socket, unit_cmd, wait_from

echo "--- start: the segment, then each peer after those it is After="
unit_cmd "xseg-segment@$SEG.service" ExecStart || fail "xseg-segment@ has no ExecStart"
"${argv[@]}" > /dev/null || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
want=(filed cached vlmcd)
order=()
while [ ${#order[@]} -lt ${#want[@]} ]; do
	progress=0
	for k in "${want[@]}"; do
		[ -n "${pid_of[$k]:-}" ] && continue
		ready=1   # every unit it is After= that we run has started
		for o in "${want[@]}"; do
			[ "$o" = "$k" ] || [ -n "${pid_of[$o]:-}" ] && continue
			grep -q "^After=.* xseg-$o@%i.service" "$units/xseg-$k@.service" && ready=0
		done
		[ $ready = 1 ] || continue
		unit_start "$k"   # READY=1 with its port bound, then ExecStartPost
		order+=("$k")
		progress=1
	done
	[ $progress = 1 ] || fail "the units' After= lines form a circle among ${want[*]}"
done
echo "started: ${order[*]}"
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":1,[^}]*"next_hop":3' ||
	fail "CACHED_PLUG did not plug cached in front of port 1: $("$BIN/xseg" info --segment "$SEG")"

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 32M --block-size 4K --iodepth 16 --seed 7 --verify full "$@" \
		> "$DIR/bench.log" 2>&1 || { cat "$DIR/bench.log"; fail "bench-xseg $* failed"; }
}
bench --op write --pattern rand
dirty=$(peer_stat 3 dirty_bytes) ||
	fail "xseg stats of cached"
echo "cached holds $dirty dirty bytes"

echo "--- stop: SIGTERM in the reverse order, each waited for"
for ((i = ${#order[@]} - 1; i >= 0; i--)); do
	k=${order[$i]}
	kill -TERM "${pid_of[$k]}"
	wait_from "${pid_of[$k]}" STOPPING=1 > /dev/null
	wait "${pid_of[$k]}"; rc=$?
	[ $rc -eq 0 ] || fail "$k exited $rc on SIGTERM (systemd: failed)"
done
unit_cmd "xseg-segment@$SEG.service" ExecStop || fail "xseg-segment@ has no ExecStop"
"${argv[@]}" || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
[ -e "/dev/shm/$SEG" ] && fail "the segment unit's ExecStop left the segment"

echo "--- every byte straight from a fresh filed"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M > /dev/null ||
	fail "xseg create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol1:64M 2> "$DIR/vlmcd2.log" &
pids+=($!)
wait_bound 2
bench --op read --pattern rand
echo "ok: the units ran in order, stopped in reverse, cached's $dirty dirty bytes reached filed"
