#!/usr/bin/env bash
# The figures' pipeline: bench-xseg --runtime and --interval-json against
# filed (the intervals add up to the run, time is kept, a --runtime write
# run leaves data a read verifies), then bench/run-figures.sh in its QUICK
# mode, shortened, and bench/plot on what it left: every figure drawn, as
# non-empty SVG and PNG files. The plotting part prints SKIP and passes
# without matplotlib (tools/install-deps installs python3-matplotlib).
set -u
SEG_PREFIX=bench-plot
. "$(dirname "$0")/lib.sh"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 256 --heap 64M >/dev/null ||
	fail "xseg create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1

bx() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --pattern rand \
		--total-size 1M --block-size 4K --iodepth 8 --verify meta --json "$@"
}

# --runtime 1.5 over a 1M working set, a line every 0.25 s
bx --op write --runtime 1.5 --interval-json 0.25 > "$DIR/w.out" || fail "runtime write exited $?: $(tail -3 "$DIR/w.out")"
python3 - "$DIR/w.out" <<'EOF' || fail "--runtime/--interval-json output is wrong: $(cat "$DIR/w.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
iv, final = [l for l in lines if l.get('interval')], lines[-1]
assert not final.get('interval'), 'the last line is not the final report'
assert 1.5 <= final['seconds'] < 3.5, f"--runtime 1.5 ran {final['seconds']} s"
assert final['requests'] > 256, f"{final['requests']} requests: not more than one pass of 256 blocks"
assert sum(l['requests'] for l in iv) == final['requests'], 'the intervals do not add up to the run'
assert 4 <= len(iv) <= 9, f'{len(iv)} intervals of 0.25 s in 1.5 s'
t = [l['t'] for l in iv]
assert t == sorted(t) and all(l['dt'] >= 0 for l in iv), 'interval times do not increase'
assert all(l["dt"] < 0.75 for l in iv), f'an interval far longer than 0.25 s: {[l["dt"] for l in iv]}'
assert final['failed'] == 0 and len(final['slice_iops']) == 20, final
for k in ('iops', 'mib_per_s', 'lat_us_p50', 'lat_us_p99', 'failed'):
    assert k in iv[0], k
EOF
bx --op read > "$DIR/r.out" || fail "reading what the --runtime write wrote: $(tail -3 "$DIR/r.out")"
grep -q '"corrupted":0' "$DIR/r.out" || fail "read after --runtime write: $(tail -1 "$DIR/r.out")"

for bad in "--runtime 0" "--runtime x" "--interval-json 0" "--interval-json 1s" "--runtime 1e9"; do
	# shellcheck disable=SC2086
	bx --op write $bad > /dev/null 2>&1
	rc=$?
	[ $rc = 2 ] || fail "bench-xseg $bad exited $rc, expected 2"
done
stop_peers

# The collection, shortened further than QUICK=1, into RES
RES=$DIR/res
QUICK=1 T=0.2 OT=1 SIZES="4K 64K" bench/run-figures.sh "$RES" > "$DIR/collect.log" 2>&1 ||
	fail "run-figures.sh QUICK=1 exited $?: $(tail -5 "$DIR/collect.log")"
for f in blocksize depth overtime threads; do
	[ -s "$RES/$f.jsonl" ] || fail "run-figures.sh left no $f.jsonl: $(tail -5 "$DIR/collect.log")"
done
python3 - "$RES" <<'EOF' || fail "run-figures.sh's JSON lines are wrong"
import json, sys, os
r = sys.argv[1]
load = lambda n: [json.loads(l) for l in open(os.path.join(r, n + '.jsonl'))]
bs, dp, ot, th = load('blocksize'), load('depth'), load('overtime'), load('threads')
assert len(bs) == 2 * 2 * 2, len(bs)            # 2 sizes x read/write x 2 paths
assert len(dp) == 2 * 2 * 2, len(dp)            # depths 1 16
assert len(th) == 2 * 2 * 2, len(th)            # threads 1 2 x depths 1 16
assert {d['path'] for d in bs} == {'filed', 'cached-wb'}
assert {d['path'] for d in ot} == {'filed', 'cached-wb', 'cached-wt'}
assert all(d['failed'] == 0 and d['corrupted'] == 0 for d in bs + dp + th if not d.get('interval'))
assert json.load(open(os.path.join(r, 'meta.json')))['cpus'] >= 1
EOF

# bench/plot is Python only: a sanitized build has nothing more to show it
if [ -n "${SANITIZE:-}" ]; then echo "bench/plot not run again under SANITIZE=$SANITIZE"; exit 0; fi
if ! python3 -c 'import matplotlib' 2>/dev/null && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
	echo "SKIP: bench/plot not run: no matplotlib (tools/install-deps installs python3-matplotlib)"
	exit 0
fi
for fmt in svg png; do
	bench/plot --format "$fmt" "$RES" "$DIR/fig-$fmt" > "$DIR/plot.log" 2>&1 ||
		fail "bench/plot --format $fmt exited $?: $(cat "$DIR/plot.log")"
	for f in blocksize depth overtime threads; do
		[ -s "$DIR/fig-$fmt/$f.$fmt" ] || fail "bench/plot drew no $f.$fmt: $(cat "$DIR/plot.log")"
	done
done
grep -q '<svg' "$DIR/fig-svg/overtime.svg" || fail "overtime.svg is not SVG"
[ "$(head -c 4 "$DIR/fig-png/depth.png" | tail -c 3)" = PNG ] || fail "depth.png is not PNG"
bench/plot "$DIR/nothing-here" "$DIR/x" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "bench/plot on a missing directory exited $rc, expected 2"
echo "ok"
