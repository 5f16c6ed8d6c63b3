#!/usr/bin/env bash
# Runs every test program in $BUILD/tests and every tests/test_*.sh script, each
# under a time limit, and ends with one line "N passed, N failed".
# Environment: BUILD (build dir), SANITIZE (address|thread|empty),
# TESTS (space-separated names to run only those).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD BIN="$PWD/$BUILD/bin"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1 abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1 halt_on_error=1}"
# Sanitized builds run slower; stress tests scale their iteration counts by this.
if [ -n "${SANITIZE:-}" ]; then export XSEG_STRESS_SCALE=${XSEG_STRESS_SCALE:-0.2}; fi
limit=${TEST_TIMEOUT:-600}

# `python3` may be a version manager's shim (pyenv's is a bash script that
# runs `pyenv exec`: 150 ms a call here, against 20 ms for the interpreter)
# and the scripts call python3 hundreds of times (lib.sh's json, peer_stat,
# port_info; raw clients): the interpreter the shim picks, found once, is
# put first in PATH under the name python3 (only that name, the same
# interpreter). test_cached_lanes.sh: 17 -> 6 s here.
py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
if [ -n "$py" ] && [ -x "$py" ]; then
	mkdir -p "$BUILD/python3-bin" && ln -sfn "$py" "$BUILD/python3-bin/python3" &&
		PATH=$PWD/$BUILD/python3-bin:$PATH
fi

# A test program killed by the time limit cannot clean up: Check's runner
# passes SIGTERM to the test process, which dies without its atexit
# handlers (its peers die with it: PR_SET_PDEATHSIG). What it left, the
# segments /dev/shm/{pt,xt}-RUNNER-* and the directories $TMPDIR/pt-RUNNER-*,
# is removed here once RUNNER is no longer alive.
sweep_leftovers() {
	local f runner
	for f in /dev/shm/pt-* /dev/shm/xt-* "${TMPDIR:-/tmp}"/pt-*; do
		[ -e "$f" ] || continue
		runner=${f##*/}; runner=${runner#*-}; runner=${runner%%-*}
		[[ "$runner" =~ ^[0-9]+$ ]] || continue
		kill -0 "$runner" 2>/dev/null && continue
		echo "removed $f, left by a test that did not finish"
		rm -rf "$f"
	done
}

# TEST_JOBS tests run at once (default 2 where there are 2 CPUs or more:
# the suite kept 2 vCPUs 57 % busy one at a time, most tests waiting on
# peers, sockets and timeouts). Each test's output is kept and printed
# whole when it ends. A script with a line "# run-tests: alone" runs by
# itself, after the others (a real Ceph, CPU pinning, timing it asserts).
jobs=${TEST_JOBS:-$(n=$(nproc 2>/dev/null || echo 1); [ "$n" -ge 2 ] && echo 2 || echo 1)}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
passed=0 failed=0 failures=()
declare -A running=()

start_one() {   # NAME COMMAND...: in the background, output in $LOGS/NAME
	local name=$1; shift
	(
		start=$SECONDS
		timeout --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
		echo "$? $((SECONDS - start))" > "$LOGS/$name.rc"
	) < /dev/null &
	running[$!]=$name
}

finish_one() {   # waits for one running test; prints its output and verdict
	local pid name rc secs
	wait -n -p pid "${!running[@]}"
	name=${running[$pid]}
	unset "running[$pid]"
	echo "=== $name"
	cat "$LOGS/$name.log"
	read -r rc secs < "$LOGS/$name.rc" || { rc=255 secs=?; }
	if [ "$rc" = 0 ]; then
		passed=$((passed + 1)); echo "--- ok   $name (${secs}s)"
	else
		failed=$((failed + 1)); failures+=("$name")
		echo "--- FAIL $name (exit $rc, ${secs}s)"
		sleep 1   # its peers exit with it
		sweep_leftovers
	fi
}

run_one() {   # NAME COMMAND...: once fewer than $1 (jobs) others run
	local most=$1; shift
	while [ "${#running[@]}" -ge "$most" ]; do finish_one; done
	start_one "$@"
}
wanted() { [ -z "${TESTS:-}" ] || [[ " $TESTS " == *" $1 "* ]]; }

alone=()
for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	n=$(basename "$t"); wanted "$n" || continue
	run_one "$jobs" "$n" "$t"
done
for s in tests/test_*.sh; do
	[ -f "$s" ] || continue
	n=$(basename "$s" .sh); wanted "$n" || continue
	if grep -q '^# run-tests: alone' "$s"; then alone+=("$s"); continue; fi
	run_one "$jobs" "$n" bash "$s"
done
for s in "${alone[@]}"; do
	run_one 1 "$(basename "$s" .sh)" bash "$s"
done
while [ "${#running[@]}" -gt 0 ]; do finish_one; done

echo
[ "$failed" -gt 0 ] && printf 'failed: %s\n' "${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
