#!/usr/bin/env bash
# `make bench`: every benchmark in turn, figures on stdout. Record what you
# quote in docs/benchmarks.md together with the command.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
echo "== xtypes (xcache, xworkq)"; "$BIN/xtypes-bench" ${QUICK:+--quick}
echo; echo "== IPC limit (nulld)"; bench/run-ipc-bench.sh
echo; echo "== filed directly and through vlmcd"; bench/run-path-bench.sh
echo; echo "== filed alone vs cached in front of it"
TMPDIR=${TMPDIR:-/dev/shm} bench/run-cached-bench.sh
echo; echo "== cached sustained (cache = half the workload) vs filed alone"
TMPDIR=${TMPDIR:-/dev/shm} bench/run-cached-sustained.sh
echo; echo "== cached threads x iodepth"
TMPDIR=${TMPDIR:-/dev/shm} bench/run-cached-threads.sh
echo; echo "== sosd on a single-node Ceph, alone and behind cached"
if command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null; then
	bench/run-sosd-bench.sh
else
	echo "skipped: no Ceph here (tools/install-deps --ceph)"
fi
echo; echo "== fio over NBD: nbdd with and without cached"; bench/run-nbdd-bench.sh
echo; echo "== synapsed over loopback vs the same path without it"; bench/run-synapsed-bench.sh
