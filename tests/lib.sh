# Shared by the end-to-end scripts (sourced, not run): a segment and a
# scratch directory per script, peers killed and everything removed on
# exit, failures that show the peers' logs.
#   SEG, DIR, BIN are set; start peers with `... & pids+=($!)`.
BIN=${BIN:-$PWD/build/bin}
SEG=${SEG_PREFIX:-e2e}-$$
DIR=$(mktemp -d)
pids=()

fail() {
	echo "FAIL: $*"
	for log in "$DIR"/*.log; do
		[ -s "$log" ] && { echo "== $log"; tail -"${LOG_LINES:-40}" "$log"; }
	done
	exit 1
}

cleanup() {
	# peers get SIGTERM and two seconds; what still runs then is killed
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 40); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.05
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

# Waits until someone has bound port $1 (10 s at most).
wait_bound() {
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\":$1,\"owner\":[1-9]" && return 0
		sleep 0.05
	done
	fail "nobody bound port $1"
}

# expect_exit STATUS COMMAND...: runs it, output in $DIR/out and $DIR/err.
expect_exit() {
	local want=$1; shift
	"$@" > "$DIR/out" 2> "$DIR/err"; local rc=$?
	[ $rc -eq "$want" ] || { cat "$DIR/err"; fail "'$*' exited $rc, expected $want"; }
}
