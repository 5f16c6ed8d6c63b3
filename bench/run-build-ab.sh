#!/usr/bin/env bash
# Two whole builds against each other (A the older, B the newer), each run
# with its own xseg, nulld and ipc-bench: where libxseg's segment layout
# differs, run-nulld-ab.sh cannot mix them. ipc-bench -> nulld for 2 s at
# depth 1 and 16, ROUNDS pairs (default 5) in alternating order (A B, B A,
# ...); prints each side's rates and the median of B/A per pair (only the
# ratio within a pair means anything on a shared machine).
#   bench/run-build-ab.sh OLD_BUILD/bin NEW_BUILD/bin
set -u
[ $# = 2 ] || { echo "usage: $0 A_BIN_DIR B_BIN_DIR" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${ROUNDS:-5}
one() { # bindir depth
	local bin=$1 seg=ab-$$-$RANDOM rps
	"$bin/xseg" create --segment $seg --ports 16 --requests 512 --heap 32M >/dev/null
	"$bin/nulld" --segment $seg --port 1 2>/dev/null & local p=$!
	for i in $(seq 50); do "$bin/xseg" info --segment $seg 2>/dev/null | grep -qE "^ +1 +[0-9]+ +yes" && break; sleep 0.05; done
	rps=$("$bin/ipc-bench" --segment $seg --port 8 --target-port 1 --iodepth $2 --seconds 2 --json | tail -1 | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["rps"]))')
	kill $p; wait $p 2>/dev/null
	"$bin/xseg" destroy --segment $seg
	echo $rps
}
for d in 1 16; do
	a=() b=()
	for r in $(seq $ROUNDS); do
		if [ $((r % 2)) = 1 ]; then a+=($(one $A $d)); b+=($(one $B $d)); else b+=($(one $B $d)); a+=($(one $A $d)); fi
	done
	python3 - $d "${a[*]}" "${b[*]}" <<'PY'
import statistics as st, sys
d = sys.argv[1]; a, b = [list(map(int, x.split())) for x in sys.argv[2:4]]
r = [y / x for x, y in zip(a, b)]
print(f"ipc-bench -> nulld, iodepth {d}: A {a} B {b}  B/A per pair median {st.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f})")
PY
done
