# Shared by the replicated write-back tests (issue 23; sourced after lib.sh
# and synapsed_lib.sh by test_cached_mirror*.sh): a primary cached on
# segment A ($SEG) mirroring through a synapsed on A's port 5 to a replica
# cached on segment B ($SEGB), behind a listening synapsed on B's port 2.
# Both blockers (port 1 of each segment) share one store: filed over
# $DIR/data by default; a test may define start_blocker_a/_b before
# calling mirror_start (sosd on one pool). RUN_A/RUN_B prefix the
# synapsed commands (`ip netns exec NS`), LISTEN/REMOTE their addresses.
#
#   A: bench-xseg -> cached (3, write-back, --mirror-port 5) -> blocker (1)
#                         \-> synapsed (5) ==TCP==> synapsed B (2)
#   B:                  cached (3, --replica) -> blocker (1, same store)
#
# The primary has --dirty-high 100: nothing is written back on its own, so
# what a write-back write left is in the caches alone until a stop, a
# degradation or a promote writes it back.
RUN_A=${RUN_A:-} RUN_B=${RUN_B:-}
PRIMARY_PF=$DIR/primary.pf REPLICA_PF=$DIR/replica.pf
MIRROR_TOTAL=${MIRROR_TOTAL:-8M}

# json_field KEY: KEY of the flat JSON object on stdin (its first
# occurrence; quotes dropped). No python: one call per check adds up on a
# loaded machine.
json_field() {
	local j
	j=$(tail -1)
	[[ $j =~ \"$1\":(\"[^\"]*\"|[^,}]*) ]] || { echo "no '$1' in: ${j:0:200}" >&2; return 1; }
	j=${BASH_REMATCH[1]}; j=${j#\"}; echo "${j%\"}"
}
# stat_of SEGMENT PORT FIELD: cached's statistic.
stat_of() { "$BIN/xseg" stats --segment "$1" --port "$2" --json 2>/dev/null | json_field "$3"; }
pstat() { stat_of "$SEG" 3 "$1"; }
rstat() { stat_of "$SEGB" 3 "$1"; }

# wait_state STATE SECONDS: the primary's mirror_state becomes STATE; the
# seconds it took in $WAITED (fails the test after SECONDS).
wait_state() {
	local t0 now
	t0=$(date +%s%N)
	for _ in $(seq $(( $2 * 20 ))); do
		[ "$(pstat mirror_state)" = "$1" ] && {
			now=$(date +%s%N); WAITED=$(( (now - t0) / 1000000 ))ms; return 0; }
		sleep 0.05
	done
	fail "the primary's mirror_state is '$(pstat mirror_state)', not '$1', after $2 s"
}

# wait_more SEGMENT FIELD THAN SECONDS: port 3's FIELD grows past THAN.
wait_more() {
	for _ in $(seq $(( $4 * 20 ))); do
		[ "$(stat_of "$1" 3 "$2" || echo 0)" -gt "$3" ] && return 0
		sleep 0.05
	done
	fail "$2 on $1 stayed at $(stat_of "$1" 3 "$2") (not above $3) for $4 s"
}

# jfield FILE KEY: KEY of the JSON object on FILE's last line.
jfield() { json_field "$2" < "$1"; }

# verified SEGMENT TARGET_PORT OP SEED OUT [extra...]: a --verify full run
# of the test's load shape (4K random, depth 16, $MIRROR_TOTAL) from port 11;
# the result in OUT. Exits as bench-xseg does (1 on failed or corrupted).
verified() {
	local seg=$1 tport=$2 op=$3 seed=$4 out=$5; shift 5
	"$BIN/bench-xseg" --segment "$seg" --port 11 --target-port "$tport" --op "$op" \
		--pattern rand --total-size "$MIRROR_TOTAL" --block-size 4K --iodepth 16 \
		--seed "$seed" --verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
# verified_ok ...: the same, every block right.
verified_ok() {
	verified "$@" || true
	intact "$5" "$3 of seed $4 on $1 port $2"
}
# intact OUT WHAT: the verified run whose result is in OUT had every block
# right.
intact() {
	tail -1 "$1" | grep -q '"failed":0,"corrupted":0' ||
		fail "$2: $(tail -1 "$1") $(tail -2 "$1.err")"
}
# store_read SEED OUT [options]: verified reads of SEED straight from B's
# blocker, cache_read through B's cached (promoted), by lose_host_a. A test
# whose load has another shape (a vlmcd volume) defines its own.
store_read() { verified "$SEGB" 1 read "$@"; }
cache_read() { verified "$SEGB" 3 read "$@"; }

# writer SEED [PORT [OPTIONS...]]: verified write passes of SEED on the
# primary (from PORT, default 10; bench-xseg OPTIONS override the load's
# shape: --target-port 2 --volume v) until $DIR/stop-SEED exists (one pass
# at least); a pass with a failed or wrong block ends it. "STATUS PASSES"
# in $DIR/writer-SEED.rc, the last pass's result in $DIR/w-SEED.out.
writer() {
	local s=$1 port=${2:-10} n=0 rc=0
	shift $(($# < 2 ? $# : 2))
	while [ $n = 0 ] || { [ ! -e "$DIR/stop-$s" ] && [ $n -lt 1000 ]; }; do
		n=$((n + 1))
		"$BIN/bench-xseg" --segment "$SEG" --port "$port" --target-port 3 --op write --pattern rand \
			--total-size "$MIRROR_TOTAL" --block-size 4K --iodepth 16 --seed "$s" \
			--verify full --timeout 30 --json "$@" > "$DIR/w-$s.out" 2> "$DIR/w-$s.err"; rc=$?
		[ $rc = 0 ] || break
	done
	echo "$rc $n" > "$DIR/writer-$s.rc"
}
writer_alive() {   # SEED PID WHEN
	kill -0 "$2" 2>/dev/null ||
		fail "$3: the writer of seed $1 ended: $(cat "$DIR/writer-$1.rc" 2>/dev/null) $(tail -1 "$DIR/w-$1.out") $(tail -3 "$DIR/w-$1.err")"
}
writer_stop() {   # SEED PID: no pass failed
	local rc n
	touch "$DIR/stop-$1"
	wait "$2"
	read -r rc n < "$DIR/writer-$1.rc"
	[ "$rc" = 0 ] || fail "seed $1: write pass $n failed (exit $rc): $(tail -1 "$DIR/w-$1.out") $(tail -3 "$DIR/w-$1.err")"
	echo "seed $1: $n verified write passes, none failed"
}

start_blocker_a() {
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2>> "$DIR/filed-a.log" &
	bapid=$!; pids+=($bapid)
	wait_bound 1
}
start_blocker_b() {
	"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" --threads 2 2>> "$DIR/filed-b.log" &
	bbpid=$!; pids+=($bbpid)
	wait_bound_in "$SEGB" 1
}
start_replica() {   # [LOG NAME]
	"$BIN/cached" --segment "$SEGB" --port 3 --blocker-port 1 --cache-size 64M \
		--replica --persist "$REPLICA_PF" --log-level info 2>> "$DIR/${1:-replica}.log" &
	rpid=$!; pids+=($rpid)
	wait_bound_in "$SEGB" 3
}
start_listener() {
	$RUN_B "$BIN/synapsed" --segment "$SEGB" --port 2 --listen "$LISTEN" --target-port 3 \
		--log-level info 2>> "$DIR/synapsed-b.log" & lpid=$!; pids+=($lpid)
	wait_bound_in "$SEGB" 2
}
start_sender() {
	$RUN_A "$BIN/synapsed" --segment "$SEG" --port 5 --remote "$REMOTE" --timeout 3 \
		--log-level info 2>> "$DIR/synapsed-a.log" & spid=$!; pids+=($spid)
	wait_bound 5
}
start_primary() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 64M \
		--write-policy writeback --dirty-high 100 --dirty-low 90 --mirror-port 5 \
		--persist "$PRIMARY_PF" --log-level info "$@" 2>> "$DIR/primary.log" &
	cpid=$!; pids+=($cpid)
	wait_bound 3
}

# xq SEGMENT PORT TARGET_PORT [xreq options]
xq() { "$BIN/xreq" --segment "$1" --port "$2" --target-port "$3" "${@:4}"; }

# held_heap_start: both segments (B's heap only 8M), every peer, the
# primary mirrored; then B's heap held by a client's 2M + 1M writes to a
# stopped nulld (port 7: $npid, the writers $h1 $h2), so that synapsed B
# cannot get a buffer for a 2M mirror write and holds it, retrying.
held_heap_start() {
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M ||
		fail "create A"
	# B's heap: buddy blocks; 2M + 1M held leave no block for 2M of data
	"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 8M ||
		fail "create B"
	start_blocker_b
	start_replica
	start_listener
	start_blocker_a
	start_sender
	start_primary
	wait_state mirrored 10
	"$BIN/nulld" --segment "$SEGB" --port 7 2> "$DIR/nulld.log" & npid=$!; pids+=($npid)
	wait_bound_in "$SEGB" 7
	echo "--- B's heap held"
	kill -STOP "$npid"
	xq "$SEGB" 12 7 --op write --target hold1 --size 2M --data H --timeout 60 \
		> "$DIR/hold1.out" 2>&1 & h1=$!
	xq "$SEGB" 13 7 --op write --target hold2 --size 1M --data H --timeout 60 \
		> "$DIR/hold2.out" 2>&1 & h2=$!
	sleep 0.5
}

# mirror_start: both segments, B's side first, then A's; returns once the
# primary is mirrored.
mirror_start() {
	if [ -z "${LISTEN:-}" ]; then
		local p; p=$(free_port)
		LISTEN=127.0.0.1:$p REMOTE=127.0.0.1:$p
	fi
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create A"
	"$BIN/xseg" create --segment "$SEGB" --ports 16 --requests 1024 --heap 128M || fail "create B"
	start_blocker_b
	start_replica
	start_listener
	start_blocker_a
	start_sender
	start_primary
	wait_state mirrored 10
	echo "primary mirrored $WAITED after its start"
	[ "$(pstat mirror_port)" = 5 ] || fail "mirror_port is '$(pstat mirror_port)', not 5"
	[ "$(rstat replica)" = true ] || fail "the replica's stats do not say replica: $(rstat replica)"
	[ "$(pstat replica)" != true ] || fail "the primary says it is a replica"
	# A replica serves no client reads.
	out=$("$BIN/xreq" --segment "$SEGB" --port 12 --target-port 3 --op read --target obj \
		--size 4K 2>&1)
	[[ "$out" == "FAILED error=1 "* ]] || fail "a read from the replica: '$out', not EPERM"
}

# host_a_lost SEED [OLD_SEED...]: phase (a). A verified write load of SEED
# through the mirrored primary on a quiet link (no mirror write fails);
# the data is then in both caches and not in the store; then lose_host_a.
host_a_lost() {
	[ "$(pstat mirror_state)" = mirrored ] || fail "the primary is $(pstat mirror_state) before phase (a)"
	local w0 f0; w0=$(rstat replica_writes) f0=$(pstat mirror_failures)
	verified_ok "$SEG" 3 write "$1" "$DIR/a-write.out"
	echo "after the load: replica_writes $(rstat replica_writes)" \
		"(mirror_writes $(pstat mirror_writes), rtt avg $(pstat mirror_rtt_avg_us) us)"
	[ "$(rstat replica_writes)" -gt "$w0" ] || fail "replica_writes did not move"
	[ "$(pstat mirror_failures)" = "$f0" ] || fail "mirror_failures $f0 -> $(pstat mirror_failures) on a quiet link"
	lose_host_a "$@"
}

# lose_host_a SEED [OLD_SEED...] (A_MORE_PIDS: more peers of A to kill; a
# function after_promote, where defined, checks more): SEED was written
# last, acknowledged, by the mirrored primary. Its data must be at risk:
# the primary holds dirty bytes (the replica as many, no mirror write in
# flight). Every peer of A is SIGKILLed and the primary's persist file
# removed: A is gone. The store lacks SEED's data (so the test means
# something); `xseg promote` on B writes the replica's back, and SEED (and
# every OLD_SEED, written back before) reads back whole straight from B's
# blocker, then through the promoted cache (store_read, cache_read).
lose_host_a() {
	local seed=$1 s; shift
	local pd rd
	pd=$(pstat dirty_bytes) rd=$(rstat dirty_bytes)
	echo "before the loss: primary dirty $pd, replica dirty $rd"
	[ "$pd" -gt 0 ] || fail "the primary holds nothing dirty: the data is not at risk"
	[ "$rd" -gt 0 ] || fail "the replica holds nothing dirty after the mirrored load"
	[ "$rd" -ge "$pd" ] || fail "the replica holds $rd dirty bytes, the primary $pd: acknowledged bytes unreplicated"
	[ "$(pstat mirror_in_flight)" = 0 ] || fail "mirror_in_flight $(pstat mirror_in_flight) with every write answered"

	echo "--- host A lost: every peer of A SIGKILLed, the primary's persist file removed"
	kill -KILL "$cpid" "$spid" "$bapid" ${A_MORE_PIDS:-}
	wait "$cpid" "$spid" "$bapid" ${A_MORE_PIDS:-} 2>/dev/null
	rm -f "$PRIMARY_PF"
	store_read "$seed" "$DIR/a-before.out"
	local c f
	c=$(jfield "$DIR/a-before.out" corrupted) f=$(jfield "$DIR/a-before.out" failed) ||
		fail "no result from the read before promote: $(cat "$DIR/a-before.out.err")"
	echo "straight from B's blocker before promote: $c of $(jfield "$DIR/a-before.out" requests) blocks wrong, $f failed"
	[ $((c + f)) -gt 0 ] || fail "the store already holds every byte before promote: the test shows nothing"
	[ "$(rstat dirty_bytes)" = "$rd" ] || fail "the replica's dirty bytes moved on their own: $rd -> $(rstat dirty_bytes)"

	local t0 t1
	t0=$(date +%s%N)
	timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
		fail "xseg promote: $(cat "$DIR/promote.out")"
	t1=$(date +%s%N)
	echo "xseg promote: $(( (t1 - t0) / 1000000 )) ms: $(head -1 "$DIR/promote.out")"
	[ "$(rstat dirty_bytes)" = 0 ] || fail "$(rstat dirty_bytes) bytes still dirty on B after promote"
	[ "$(rstat replica)" = false ] || fail "still a replica after promote"
	[ "$(rstat promote_marker_said)" = mirrored ] ||
		fail "promoted, yet the marker read says '$(rstat promote_marker_said)'"
	for s in "$seed" "$@"; do
		store_read "$s" "$DIR/a-after-$s.out"
		intact "$DIR/a-after-$s.out" "seed $s straight from B's blocker after promote"
	done
	if declare -F after_promote > /dev/null; then after_promote; fi
	echo "every acknowledged byte read back straight from B's blocker"
	# now an ordinary cache: it serves reads
	cache_read "$seed" "$DIR/a-cached.out"
	intact "$DIR/a-cached.out" "seed $seed through the promoted cache"
}

mirror_sanitizers() {
	grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
	return 0
}
