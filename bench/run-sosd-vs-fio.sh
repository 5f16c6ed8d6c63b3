#!/usr/bin/env bash
# sosd alone against fio's rados engine, interleaved (fio, sosd, sosd, fio,
# ...) so that both see the same load on a shared machine: 4K and 64K random
# writes and reads at iodepth 16, REPEAT (3) rounds, IOPS per run. Same
# workload shape for both: TOTAL (64M) in 4M objects, the same objects every
# round, written once before the first. SOSD_BASELINE=PATH
# adds another sosd binary (an older build) to each round, on its own port
# (SOSD_OPTS, BASELINE_OPTS: more options for each sosd);
# BENCH_OPTS are passed to bench-xseg; SIZES (4K 64K) picks the block sizes.
# HOP=1 adds sosd behind a bare hop (nulld --forward) to each round: what one
# more process in the path costs here (fio has none between it and librados).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
REPEAT=${REPEAT:-3}
TOTAL=${TOTAL:-64M}
SEG=sosd-vs-fio-$$
CEPH_DIR=$(mktemp -d /tmp/sosd-vs-fio.XXXXXX)
SOSD_BASELINE=${SOSD_BASELINE:-}
spid= bpid= hpid=
cleanup() {
	[ -n "$hpid" ] && { kill -TERM "$hpid" 2>/dev/null; wait "$hpid" 2>/dev/null; }
	[ -n "$spid" ] && { kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; }
	[ -n "$bpid" ] && { kill -TERM "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; }
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	tools/micro-ceph stop "$CEPH_DIR" 2>/dev/null
	rm -rf "$CEPH_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. bench/bench_lib.sh
start_ceph_and_sosd
if [ -n "$SOSD_BASELINE" ]; then
	"$SOSD_BASELINE" --segment "$SEG" --port 2 --pool xseg --conf "$CONF" ${BASELINE_OPTS:-} & bpid=$!
	wait_bound 2
fi
if [ "${HOP:-0}" = 1 ]; then
	"$BIN/nulld" --segment "$SEG" --port 3 --forward 1 2>/dev/null & hpid=$!
	wait_bound 3
fi

fio_iops() {   # rw bs
	fio --name=vs --ioengine=rados --clientname=admin --pool=xseg --conf="$CONF" --rw="$1" \
		--bs="$2" --iodepth=16 --size="$TOTAL" --nrfiles=$(( $(numfmt --from=iec "$TOTAL") / 4194304 )) \
		--output-format=json 2>/dev/null |
	python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(round(j['read' if '$1' == 'randread' else 'write']['iops']))"
}
sosd_iops() {   # op bs seed [port]
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "${4:-1}" --op "$1" --pattern rand \
		--total-size "$TOTAL" --block-size "$2" --iodepth 16 --object-size 4M --seed "$3" \
		--timeout 120 ${BENCH_OPTS:-} --json | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['iops']))"
}
# The cluster slows down as a run goes on (memstore fills), so whoever
# runs first in a round has an edge: odd rounds run fio first, even rounds
# sosd (and the baseline) first.
one() {   # op bs round
	local rw=rand$1 f s b= h=
	[ "$1" = write ] || rw=randread
	[ $(($3 % 2)) = 1 ] && f=$(fio_iops "$rw" "$2")
	s=$(sosd_iops "$1" "$2" 1)
	[ -n "$SOSD_BASELINE" ] && b="  baseline $(sosd_iops "$1" "$2" 1 2)"
	if [ -n "$hpid" ]; then
		h=$(sosd_iops "$1" "$2" 1 3)
		h="  through a hop $h ($(python3 -c "print(f'{$h / $s:.2f}')")x sosd)"
	fi
	[ $(($3 % 2)) = 0 ] && f=$(fio_iops "$rw" "$2")
	printf '%-4s %-6s fio %6s  sosd %6s (%.2fx fio)%s%s\n' "$2" "$1" "$f" "$s" \
		"$(python3 -c "print($s / $f)")" "$b" "$h"
}
# Both write the same objects every round, and both sets are written once
# before the first round: memstore is several times faster at overwriting
# an object than at filling a new one, and fio overwrites its own files from
# its second run on (bench-xseg names objects by seed: one seed for all).
set -- ${SIZES:-4K 64K}
fio_iops randwrite "$1" > /dev/null
sosd_iops write "$1" 1 > /dev/null
for bs in ${SIZES:-4K 64K}; do for r in $(seq "$REPEAT"); do
	one write "$bs" "$r"
	one read "$bs" "$r"
done; done
