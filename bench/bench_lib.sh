# Shared by the bench/run-*.sh scripts (sourced, not run): BIN and SEG are
# set by the caller; wait_bound waits for a peer to bind its port;
# stop_peers stops the peers in $pids; bench_cleanup (for `trap ... EXIT`)
# also removes $SEG and $DATA.

# SIGTERM to each of $pids, last started first (a cache before its
# blocker: it writes its dirty data back before it exits), waiting for each.
stop_peers() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null; wait "${pids[i]}" 2>/dev/null
	done
}

# Waits until someone has bound port $1 of $SEG (10 s at most), else exits.
wait_bound() {
	for _ in $(seq 200); do
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\": *$1,[^}]*\"owner\": *[1-9]" && return 0
		sleep 0.05
	done
	echo "port $1 never bound" >&2; exit 1
}

# The usual EXIT trap: peers stopped (a cache before its blocker), the
# segment destroyed, the data directory removed.
bench_cleanup() {
	stop_peers
	"$BIN/xseg" destroy --segment "$SEG" 2>/dev/null
	rm -rf "$DATA"
}
