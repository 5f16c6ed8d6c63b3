#!/usr/bin/env bash
# A manual soak (not in make check): verified writes through
# bench-xseg -> vlmcd -> cached (write-back, --persist) -> filed while
# faults chosen at random from CHAOS_SEED land at random times: SIGKILL
# or SIGTERM of cached (restarted on its persist file, plugged back),
# SIGKILL of filed or vlmcd (restarted), SIGSTOP/SIGCONT of filed, a
# FLUSH, a policy switch, an unplug and plug. Every fault is logged with
# a timestamp in $CHAOS_KEEP/faults.log.
#
# The promise checked: no acknowledged byte is lost. Each writer writes
# passes over its own volumes, a new seed every pass (pass P: seed P);
# a volume keeps the list of passes that wrote it, each with the blocks
# no reply acknowledged (--unacked). A volume is read back (after each
# pass, and at the end through the path and then from filed alone) layer
# by layer: the newest pass's seed; the blocks that differ must be ones
# it did not acknowledge, and must hold the pass before's seed (or be
# among the blocks that one did not acknowledge, and so on down; blocks
# no pass acknowledged may hold anything).
#
#   CHAOS_SECONDS  how long the writers run (default 120)
#   CHAOS_SEED     the faults' choice and timing (default: the time)
#   CHAOS_WRITERS  writers at once (default 2; 2 cores: keep it small)
#   CHAOS_FAULTS   faults to draw from (default all), e.g. "kill_cached flush"
#   CHAOS_KEEP     where the logs stay (default /tmp/chaos-SEED-PID)
#   CHAOS_CACHE_SIZE cached's --cache-size (default 32M; the volumes hold
#                  2 x 3 x 4M: 8M makes it evict and write back under load)
#   CHAOS_BS       bench-xseg's --block-size (default 4K, one bucket)
#   CHAOS_PERSIST_SYNC cached's --persist-sync (default flush)
# Exit 0 when every read back verifies, 1 on the first failure (logs kept).
set -u
SEG_PREFIX=chaos
. "$(dirname "$0")/lib.sh"

SECONDS_RUN=${CHAOS_SECONDS:-120}
CSEED=${CHAOS_SEED:-$(date +%s)}
WRITERS=${CHAOS_WRITERS:-2}
FAULTS=(${CHAOS_FAULTS:-kill_cached term_cached kill_filed kill_vlmcd stop_filed flush policy unplug_plug
	kill_both stopped_kill_cached stopped_term_cached kill_in_unplug kill_in_flush kill_in_policy})
KEEP=${CHAOS_KEEP:-/tmp/chaos-$CSEED-$$}
VOLS_PER_WRITER=3
VOL=4M
mkdir -p "$KEEP"
FLOG=$KEEP/faults.log
: > "$FLOG"

log() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$FLOG"; }
# failures keep the scratch directory's logs in $KEEP
chaos_fail() {
	log "FAIL: $*"
	touch "$DIR/stop"
	cp -r "$DIR"/*.log "$DIR"/w* "$KEEP"/ 2>/dev/null
	echo "replay: CHAOS_SEED=$CSEED CHAOS_SECONDS=$SECONDS_RUN CHAOS_WRITERS=$WRITERS CHAOS_CACHE_SIZE=${CHAOS_CACHE_SIZE:-32M} CHAOS_BS=${CHAOS_BS:-4K} CHAOS_PERSIST_SYNC=${CHAOS_PERSIST_SYNC:-flush}; logs in $KEEP"
	fail "$*"
}

# ---- the peers ----
vols=()
for w in $(seq "$WRITERS"); do
	for v in $(seq $VOLS_PER_WRITER); do vols+=(--volume "w$w-v$v:$VOL"); done
done
start_filed() {
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2>> "$DIR/filed.log" & filed=$!
	pids+=($filed); echo "$filed" > "$DIR/filed.pid"
	wait_bound 1
}
start_vlmcd() {
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 "${vols[@]}" --object-size 1M \
		2>> "$DIR/vlmcd.log" & vlmcd=$!
	pids+=($vlmcd); echo "$vlmcd" > "$DIR/vlmcd.pid"
	wait_bound 2
}
# cached in front of filed, write-back, dirty-high low enough that it also
# writes back on its own under load; $CHAOS_PERSIST_DIR holds its file
# (default: the scratch directory; a tmpfs in /dev/shm works too).
PF=${CHAOS_PERSIST_DIR:-$DIR}/chaos-$$.pf
start_cached() {
	"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size "${CHAOS_CACHE_SIZE:-32M}" \
		--object-size 1M --write-policy writeback --dirty-high 60 --dirty-low 40 \
		--persist "$PF" --persist-sync "${CHAOS_PERSIST_SYNC:-flush}" 2>> "$DIR/cached.log" & cached=$!
	pids+=($cached); echo "$cached" > "$DIR/cached.pid"
	for _ in $(seq 200); do
		kill -0 "$cached" 2>/dev/null || { wait "$cached"; return $?; }
		"$BIN/xseg" info --segment "$SEG" --json 2>/dev/null |
			grep -Eq "\"port\":3,\"owner\":$cached[,}]" && return 0
		sleep 0.05
	done
	return 124
}
# plug: puts cached back in front of filed unless it is there already
plug() {
	local out
	out=$("$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 2>&1) && { log "  plug: ok"; return 0; }
	case $out in *"plugged via port 3 already"*) log "  plug: already"; return 0;; esac
	log "  plug: FAILED: $out"
	return 1
}

"$BIN/xseg" create --segment "$SEG" --ports 24 --requests 1024 --heap 64M || fail "create"
start_filed; start_vlmcd
start_cached || fail "cached did not start"
plug || fail "first plug"
MAINPID=$BASHPID
trap '[ "$BASHPID" = "$MAINPID" ] && cleanup' EXIT
log "start: seed $CSEED, $SECONDS_RUN s, cache ${CHAOS_CACHE_SIZE:-32M}, block ${CHAOS_BS:-4K}, persist-sync ${CHAOS_PERSIST_SYNC:-flush}, $WRITERS writers, faults: ${FAULTS[*]}, dir $DIR, keep $KEEP"

# ---- block lists ----
# blist OP A [B]: python over bench-xseg block lists ("FIRST COUNT" lines
# after a header): count A; sub A B: the blocks of A not in B (count);
# and A B OUT: A and B written to OUT (header of A).
blist() {
	python3 - "$@" <<'EOF'
import sys
def load(p):
    with open(p) as f:
        head = f.readline()
        s = set()
        for line in f:
            a, n = map(int, line.split())
            s.update(range(a, a + n))
    return head, s
op = sys.argv[1]
if op == "count":
    print(len(load(sys.argv[2])[1]))
elif op == "sub":
    a, b = load(sys.argv[2])[1], load(sys.argv[3])[1]
    d = sorted(a - b)
    print(len(d), d[:8])
elif op == "and":
    h, a = load(sys.argv[2]); b = load(sys.argv[3])[1]
    with open(sys.argv[4], "w") as f:
        f.write(h)
        for i in sorted(a & b):
            f.write("%d 1\n" % i)
EOF
}

# bench OP VOLUME SEED OUT PORT [extra...]
bench() {
	local op=$1 vol=$2 seed=$3 out=$4 port=$5; shift 5
	"$BIN/bench-xseg" --segment "$SEG" --port "$port" --target-port 2 --volume "$vol" \
		--op "$op" --pattern rand --total-size $VOL --block-size "${CHAOS_BS:-4K}" --iodepth 8 \
		--seed "$seed" --verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}

# readback VOL PORT WHERE: every layer of VOL's history ($DIR/hist-VOL:
# lines "SEED UNACKED-FILE", oldest first) checked as the header says.
# Reads that fail (a fault under them) are retried; a wrong block fails.
readback() {
	local vol=$1 port=$2 where=$3 hist=$DIR/hist-$1
	[ -s "$hist" ] || return 0
	local seeds=() lists=() n i rest="" tries out
	while read -r s u; do seeds+=("$s"); lists+=("$u"); done < "$hist"
	n=${#seeds[@]}
	for ((i = n - 1; i >= 0; i--)); do
		out=$DIR/rb-$vol-$port
		for tries in $(seq 20); do
			bench read "$vol" "${seeds[$i]}" "$out" "$port" --differing "$out.diff"
			[ "$(json "$out" failed 2>/dev/null)" = 0 ] && [ -f "$out.diff" ] && break
			sleep 0.5
		done
		[ "$(json "$out" failed 2>/dev/null)" = 0 ] ||
			chaos_fail "$where: $vol seed ${seeds[$i]}: reads still fail after $tries tries: $(tail -2 "$out.err")"
		# restrict to what the newer layers left open
		if [ -n "$rest" ]; then
			blist and "$out.diff" "$rest" "$out.rest"
		else
			cp "$out.diff" "$out.rest"
		fi
		local bad
		bad=$(blist sub "$out.rest" "${lists[$i]}")
		[ "${bad%% *}" = 0 ] || {
			cp "$out.rest" "$KEEP/lost-$vol-${seeds[$i]}"
			chaos_fail "$where: $vol: $bad blocks acknowledged by pass ${seeds[$i]} (layer $((i + 1)) of $n) read back as neither it nor an older acknowledged pass: acknowledged data lost"
		}
		[ "$(blist count "$out.rest")" = 0 ] && return 0
		rest=$DIR/rest-$vol-$port; cp "$out.rest" "$rest"
	done
	return 0   # what is left no pass acknowledged: anything goes
}

# ---- writers ----
# writer W: passes on its volumes in turn, pass number = seed (unique
# across writers: W, W+WRITERS, ...), each read back when it ends.
writer() {
	local w=$1 p=$1 k=0 vol out rc port=$((9 + 2 * $1))
	while [ ! -e "$DIR/stop" ]; do
		vol=w$w-v$((k % VOLS_PER_WRITER + 1)); k=$((k + 1))
		out=$DIR/w$w-p$p
		bench write "$vol" "$p" "$out" "$port" --unacked "$out.unacked"; rc=$?
		[ -f "$out.unacked" ] || chaos_fail "writer $w pass $p on $vol: no --unacked list (exit $rc): $(tail -3 "$out.err")"
		echo "$p $out.unacked" >> "$DIR/hist-$vol"
		local f u un
		f=$(json "$out" failed 2>/dev/null); u=$(json "$out" unacked 2>/dev/null)
		un=$(json "$out" unanswered 2>/dev/null)
		[ "${f:-x}" = 0 ] || log "writer $w pass $p on $vol: exit $rc, failed ${f:-?}, unacked ${u:-?}, unanswered ${un:-?}"
		local secs; secs=$(json "$out" seconds 2>/dev/null)
		awk "BEGIN { exit !(${secs:-99} < 29) }" ||
			log "SUSPECT: writer $w pass $p took ${secs:-?} s, $un unanswered (a hang?)"
		[ "$(json "$out" corrupted 2>/dev/null)" = 0 ] || chaos_fail "writer $w pass $p: corrupted on write"
		readback "$vol" $((port + 1)) "after pass $p"
		echo "$p" >> "$DIR/w$w.passes"
		p=$((p + WRITERS))
	done
}

# ---- faults ----
restart_cached() {   # [noplug]
	local rc before
	before=$(wc -l < "$DIR/cached.log")
	start_cached; rc=$?
	[ $rc = 0 ] || chaos_fail "cached did not restart on its persist file (exit $rc): $(tail -5 "$DIR/cached.log")"
	log "  cached restarted, pid $cached: $(tail -n +$((before + 1)) "$DIR/cached.log" | grep -E 'persist: .*recovered|left marked' | cut -c30-200 | tr '\n' ' ')"
	[ "${1:-}" = noplug ] && return 0
	plug || chaos_fail "cached restarted but cannot be plugged back"
}
fault() {
	local f=$1 t
	case $f in
	kill_cached)
		log "FAULT kill_cached pid $cached (dirty $(peer_stat 3 dirty_bytes 2>/dev/null))"
		kill -KILL "$cached"; wait "$cached" 2>/dev/null
		restart_cached ;;
	term_cached)
		log "FAULT term_cached pid $cached (dirty $(peer_stat 3 dirty_bytes 2>/dev/null))"
		kill -TERM "$cached"
		t=0
		while kill -0 "$cached" 2>/dev/null && [ $t -lt 1200 ]; do sleep 0.05; t=$((t + 1)); done
		kill -0 "$cached" 2>/dev/null && chaos_fail "cached did not stop within 60 s of SIGTERM"
		wait "$cached"; rc=$?
		[ $rc = 0 ] || log "SUSPECT: cached exited $rc on SIGTERM"
		restart_cached ;;
	kill_filed)
		log "FAULT kill_filed pid $filed"
		kill -KILL "$filed"; wait "$filed" 2>/dev/null
		sleep "0.$((RANDOM % 10))"
		start_filed; log "  filed restarted, pid $filed" ;;
	kill_vlmcd)
		log "FAULT kill_vlmcd pid $vlmcd"
		kill -KILL "$vlmcd"; wait "$vlmcd" 2>/dev/null
		sleep "0.$((RANDOM % 10))"
		start_vlmcd; log "  vlmcd restarted, pid $vlmcd" ;;
	stop_filed)
		t=$((RANDOM % 4 + 1))
		log "FAULT stop_filed pid $filed for $t s"
		kill -STOP "$filed"; sleep "$t"; kill -CONT "$filed"; log "  filed continued" ;;
	flush)
		local v=w$((RANDOM % WRITERS + 1))-v$((RANDOM % VOLS_PER_WRITER + 1))
		log "FAULT flush $v"
		out=$("$BIN/xreq" --segment "$SEG" --port 20 --target-port 2 --op flush --target "$v" --timeout 60 2>&1)
		log "  flush: $? $out" ;;
	policy)
		# write-through for 0-3 s, then (mostly) back to write-back: kills
		# must find dirty data
		t=$((RANDOM % 4))
		log "FAULT policy writethrough for $t s"
		out=$("$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough 2>&1)
		log "  policy writethrough: $? $out"
		sleep "$t"
		if [ $((RANDOM % 4)) != 0 ]; then
			out=$("$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback 2>&1)
			log "  policy writeback: $? $out"
		fi ;;
	unplug_plug)
		log "FAULT unplug_plug"
		out=$("$BIN/xseg" unplug --segment "$SEG" --via 3 2>&1)
		log "  unplug: $? $out"
		sleep "0.$((RANDOM % 10))"
		plug || chaos_fail "plug after unplug failed" ;;
	# ---- two at once ----
	kill_both)
		log "FAULT kill_both filed $filed cached $cached (dirty $(peer_stat 3 dirty_bytes 2>/dev/null))"
		kill -KILL "$filed" "$cached"; wait "$filed" "$cached" 2>/dev/null
		if [ $((RANDOM % 2)) = 0 ]; then
			start_filed; log "  filed restarted first, pid $filed"; restart_cached
		else
			# (a plug waits for the recovery, which reads from filed)
			restart_cached noplug; sleep "0.$((RANDOM % 10))"; start_filed
			log "  filed restarted after cached, pid $filed"; plug || chaos_fail "plug" 
		fi ;;
	stopped_kill_cached)
		t=$((RANDOM % 3 + 1))
		log "FAULT stopped_kill_cached: filed $filed stopped, cached $cached killed (dirty $(peer_stat 3 dirty_bytes 2>/dev/null)), filed continued after $t s"
		kill -STOP "$filed"; sleep "0.$((RANDOM % 10))"
		kill -KILL "$cached"; wait "$cached" 2>/dev/null
		( sleep "$t"; kill -CONT "$filed"; log "  filed continued" ) & local cp=$!
		restart_cached
		wait $cp ;;
	stopped_term_cached)
		t=$((RANDOM % 3 + 1))
		log "FAULT stopped_term_cached: filed $filed stopped, cached $cached SIGTERM (dirty $(peer_stat 3 dirty_bytes 2>/dev/null)), filed continued after $t s"
		kill -STOP "$filed"; sleep "0.$((RANDOM % 5))"
		kill -TERM "$cached"; sleep "$t"; kill -CONT "$filed"; log "  filed continued"
		t=0
		while kill -0 "$cached" 2>/dev/null && [ $t -lt 1200 ]; do sleep 0.05; t=$((t + 1)); done
		kill -0 "$cached" 2>/dev/null && chaos_fail "cached did not stop within 60 s of SIGTERM"
		wait "$cached"; rc=$?
		[ $rc = 0 ] || log "SUSPECT: cached exited $rc on SIGTERM"
		restart_cached ;;
	kill_in_unplug|kill_in_flush|kill_in_policy)
		# filed stopped first (mostly): the write-back the tool waits for
		# cannot finish before the kill
		local bp held=0
		[ $((RANDOM % 4)) != 0 ] && { held=1; kill -STOP "$filed"; }
		case $f in
		kill_in_unplug) "$BIN/xseg" unplug --segment "$SEG" --via 3 > "$DIR/bg.out" 2>&1 & bp=$! ;;
		kill_in_flush) "$BIN/xreq" --segment "$SEG" --port 20 --target-port 2 --op flush \
			--target w1-v1 --timeout 60 > "$DIR/bg.out" 2>&1 & bp=$! ;;
		kill_in_policy) "$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough > "$DIR/bg.out" 2>&1 & bp=$! ;;
		esac
		sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
		log "FAULT $f: cached $cached killed (dirty $(peer_stat 3 dirty_bytes 2>/dev/null)), filed stopped: $held"
		kill -KILL "$cached"; wait "$cached" 2>/dev/null
		[ $held = 1 ] && { sleep "0.$((RANDOM % 10))"; kill -CONT "$filed"; }
		t=0
		while kill -0 $bp 2>/dev/null && [ $t -lt 1200 ]; do sleep 0.05; t=$((t + 1)); done
		kill -0 $bp 2>/dev/null && { log "SUSPECT: $f: the tool still waits 60 s after cached died"; kill $bp; }
		wait $bp; log "  $f: the tool exited $?: $(head -c 300 "$DIR/bg.out")"
		restart_cached ;;
	esac
}
# the faults run here, in the shell that started the peers (it can wait
# for them); the writers in the background
faulter() {
	RANDOM=$CSEED
	local n=0 end=$((SECONDS + SECONDS_RUN))
	while [ $SECONDS -lt $end ] && [ ! -e "$DIR/stop" ]; do
		sleep "$((RANDOM % 3)).$((RANDOM % 10))"
		[ -e "$DIR/stop" ] && break
		n=$((n + 1))
		fault "${FAULTS[$((RANDOM % ${#FAULTS[@]}))]}"
		for p in $filed $vlmcd $cached; do
			kill -0 "$p" 2>/dev/null || chaos_fail "a peer (pid $p) died on its own"
		done
	done
	log "faulter: $n faults"
	echo "$n" > "$DIR/faults.n"
}

wpids=()
for w in $(seq "$WRITERS"); do writer "$w" & wpids+=($!); done
faulter
[ -e "$DIR/stop" ] && chaos_fail "a writer failed (see above)"
touch "$DIR/stop"
for p in "${wpids[@]}"; do wait "$p" || chaos_fail "writer failed"; done

log "end: every volume through the path"
plug || chaos_fail "final plug"
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writeback > /dev/null 2>&1
for h in "$DIR"/hist-*; do readback "${h#$DIR/hist-}" 21 "end, through the path"; done
log "end: unplug, every volume from filed"
out=$("$BIN/xseg" unplug --segment "$SEG" --via 3 2>&1) || chaos_fail "final unplug: $out"
for h in "$DIR"/hist-*; do readback "${h#$DIR/hist-}" 21 "end, filed alone"; done
passes=$(cat "$DIR"/w*.passes 2>/dev/null | wc -l)
log "ok: seed $CSEED, $SECONDS_RUN s, $passes passes, $(cat "$DIR/faults.n") faults, every acknowledged block read back"
