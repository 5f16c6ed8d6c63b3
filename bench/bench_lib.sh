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

# A micro-ceph in $CEPH_DIR (its conf in CONF) and segment $SEG; exits with a
# message when the cluster does not start.
start_ceph_and_segment() {
	CONF=$(WATCH_PID=$$ tools/micro-ceph start "$CEPH_DIR" | tail -1)
	[ -f "$CONF" ] || { echo "micro-ceph did not start" >&2; exit 1; }
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 256M >/dev/null || exit 1
}

# For the sosd-against-fio scripts: start_ceph_and_segment, and sosd on port
# 1 with ${SOSD_OPTS} (its pid in spid); exits with a message when fio lacks
# the rados engine.
start_ceph_and_sosd() {
	command -v fio >/dev/null && fio --enghelp 2>/dev/null | grep -qw rados ||
		{ echo "fio with the rados engine is needed (tools/install-deps)" >&2; exit 1; }
	start_ceph_and_segment
	"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" ${SOSD_OPTS:-} & spid=$!
	wait_bound 1
}

# Context switches so far, all threads of process $1 (voluntary and not).
cs_of() {
	cat /proc/"$1"/task/*/status 2>/dev/null |
		awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }'
}
