#!/usr/bin/env bash
# `make run`: the main job on the embedded default, from segment creation to
# teardown. For now (issue 2) the path is a client and the null responder:
# it shows the segment working and measures the IPC limit. Later issues make
# it bench-xseg -> vlmcd -> cached -> filed.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
SEG=${SEGMENT:-xseg-run-$$}
REQUESTS=${REQUESTS:-200000}
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
}
trap cleanup EXIT
trap 'echo "interrupted: stopping"; exit 130' INT TERM

step() { echo; echo "== $*"; }

step "creating segment $SEG"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 64M || exit 1

step "starting nulld on port 1"
"$BIN/nulld" --segment "$SEG" --port 1 --threads 1 & pids+=($!)
for _ in $(seq 100); do
	"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null | grep -q '"port": *1,' && break
	sleep 0.05
done

rc=0
for depth in 1 16; do
	step "ipc-bench: $REQUESTS round trips at iodepth $depth"
	"$BIN/ipc-bench" --segment "$SEG" --port 2 --target-port 1 \
		--iodepth "$depth" --requests "$REQUESTS" || rc=1
done

step "segment after the run"
"$BIN/xseg" info --segment "$SEG"
exit $rc
