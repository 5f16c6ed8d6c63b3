#!/usr/bin/env bash
# CPU time per operation of each process, fio's rados engine vs bench-xseg
# -> sosd, on a throw-away single-node Ceph: random writes then reads at
# iodepth 16, ROUNDS (2) times, both clients on the same objects every round.
# Per run: IOPS, then µs of CPU per operation in the OSD, in sosd, in the
# client (fio or bench-xseg; fio's includes its connection set-up) and
# idle CPU (over the whole run: fio's includes the set-up's too). BS (64K), TOTAL (256M, in 4M objects), SOSD_OPTS, BENCH_OPTS.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
TOTAL=${TOTAL:-256M} BS=${BS:-64K} ROUNDS=${ROUNDS:-2}
SEG=sosd-cpu-$$
CEPH_DIR=$(mktemp -d /tmp/sosd-cpu.XXXXXX)
TIMES=$(mktemp)
spid=
cleanup() {
	[ -n "$spid" ] && { kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; }
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	tools/micro-ceph stop "$CEPH_DIR" >/dev/null 2>&1
	rm -rf "$CEPH_DIR" "$TIMES"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. bench/bench_lib.sh
start_ceph_and_sosd
osd=$(pgrep -x ceph-osd | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }       # utime + stime
idle() { awk '/^cpu /{print $5 + $6}' /proc/stat; }        # idle + iowait
ncpu=$(nproc)
measure() {   # LABEL PARSER CMD...: one line of figures
	local label=$1 parse=$2; shift 2
	local o0 s0 i0 t0 o1 s1 i1 t1 out
	o0=$(ticks "$osd") s0=$(ticks "$spid") i0=$(idle) t0=$(date +%s.%N)
	out=$(/usr/bin/time -o "$TIMES" -f "%U %S" "$@" 2>/dev/null)
	o1=$(ticks "$osd") s1=$(ticks "$spid") i1=$(idle) t1=$(date +%s.%N)
	python3 - "$label" "$(echo "$out" | python3 -c "$parse")" "$t0" "$t1" \
		"$((o1 - o0))" "$((s1 - s0))" "$((i1 - i0))" "$(cat "$TIMES")" "$(getconf CLK_TCK)" \
		"$nops" <<'PY'
import sys
label, iops, t0, t1, osd, sosd, idle, client, hz, n = sys.argv[1:]
iops, hz, n = float(iops), float(hz), int(n)
us = lambda ticks: ticks / hz / n * 1e6
cl = sum(float(x) for x in client.split())
print(f"{label:10} {iops:7.0f} IOPS   µs CPU per op: OSD {us(int(osd)):5.0f}  sosd {us(int(sosd)):4.0f}"
      f"  client {cl / n * 1e6:4.0f}  idle {us(int(idle)):4.0f}")
PY
}
FIO_PARSE="import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['read']['iops'] or j['write']['iops'])"
XSEG_PARSE="import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])['iops'])"
nobj=$(( $(numfmt --from=iec "$TOTAL") / 4194304 ))
nops=$(( $(numfmt --from=iec "$TOTAL") / $(numfmt --from=iec "$BS") ))
FIO=(fio --name=vs --ioengine=rados --clientname=admin --pool=xseg --conf="$CONF" --bs="$BS"
     --iodepth=16 --size="$TOTAL" --nrfiles="$nobj" --output-format=json)
XSEG=("$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --pattern rand
      --total-size "$TOTAL" --block-size "$BS" --iodepth 16 --object-size 4M --seed 1
      --timeout 120 ${BENCH_OPTS:-} --json)
# both sets written once first: memstore fills a new object far slower than
# it overwrites one
"${FIO[@]}" --rw=randwrite > /dev/null
"${XSEG[@]}" --op write > /dev/null
for r in $(seq "$ROUNDS"); do
	for op in write read; do
		measure "fio $op" "$FIO_PARSE" "${FIO[@]}" --rw="rand$op"
		measure "sosd $op" "$XSEG_PARSE" "${XSEG[@]}" --op "$op"
	done
done
