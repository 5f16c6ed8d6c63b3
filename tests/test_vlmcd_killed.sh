#!/usr/bin/env bash
# vlmcd forwards a request within one object under the object's name, in
# place (no copy), and gives it the volume's name back with the reply.
# Killed in the middle of that: bench-xseg -> vlmcd -> filed, verified
# writes pass after pass over one volume (--runtime: the same data each
# pass, no gap between passes), vlmcd SIGKILLed at a random moment while
# its renamed writes are out, restarted; three rounds, each on a volume of
# its own. Every acknowledged write reads back through the
# restarted vlmcd and through a second vlmcd that never saw a request (a
# block differs only where a write failed). Then a request that spans two
# objects is split and copied, as before, and the figures say which path
# each took.
set -u
SEG_PREFIX=vlmcd-killed
. "$(dirname "$0")/lib.sh"

VOL=8M ROUNDS=3 BLOCKS=2048
bench() {   # bench OP ROUND OUT [extra...]
	local op=$1 k=$2 out=$3; shift 3
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume "v$k" --op "$op" \
		--pattern rand --total-size $VOL --block-size 4K --iodepth 16 --seed "$k" \
		--verify full --timeout 30 --json "$@" > "$out" 2> "$out.err"
}
vols=()
for k in $(seq $ROUNDS); do vols+=(--volume "v$k:$VOL"); done
start_vlmcd() {   # start_vlmcd LOG
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 "${vols[@]}" --object-size 1M \
		2> "$DIR/$1" & vpid=$!
	pids+=($vpid)
	wait_bound 2
}
# Reads of round K forgive the blocks its writer listed as never
# acknowledged in any pass (--unacked: the same data each pass) and no
# other: block by block, not by counts.
check_round() {   # check_round K WHERE OUT
	local c
	c=$(json "$3" corrupted) || fail "$2: no result reading round $1"
	[ "$(json "$3" failed)" = 0 ] || fail "$2: reading round $1 failed"
	[ "$c" = 0 ] ||
		fail "$2: $c acknowledged blocks of round $1 differ (${failed[$1]} writes failed, ${passes[$1]} passes): an acknowledged write was lost"
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 512 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
start_vlmcd vlmcd0.log

declare -A failed passes
for k in $(seq $ROUNDS); do
	# Pass after pass until the kill: bench-xseg stops at the first submit
	# that finds vlmcd gone.
	bench write "$k" "$DIR/w$k.out" --runtime 60 --unacked "$DIR/u$k" & wpid=$!
	for _ in $(seq 400); do
		[ "$(peer_stat 2 renamed 2>/dev/null || echo 0)" -gt $((2 * BLOCKS)) ] && break
		sleep 0.01
	done
	[ "$(peer_stat 2 renamed)" -gt $((2 * BLOCKS)) ] || fail "round $k: vlmcd renamed too few writes"
	sleep "0.$((RANDOM % 2))$((RANDOM % 10))"
	kill -KILL "$vpid"; wait "$vpid" 2>/dev/null
	wait "$wpid"; rc=$?
	[ "$rc" -ne 3 ] || fail "round $k: bench-xseg hung after vlmcd died"
	failed[$k]=$(json "$DIR/w$k.out" failed) || fail "round $k: no result from bench-xseg"
	n=$(json "$DIR/w$k.out" requests)
	passes[$k]=$((n / BLOCKS))
	# The kill found writes out: they failed (else it proved nothing).
	[ "${failed[$k]}" -gt 0 ] || fail "round $k: no write failed: vlmcd was not killed under load"
	echo "round $k: vlmcd killed after $n writes (${passes[$k]} whole passes), ${failed[$k]} failed, $(json "$DIR/w$k.out" unacked) blocks never acknowledged"
	start_vlmcd "vlmcd$k.log"
	for j in $(seq "$k"); do
		bench read "$j" "$DIR/r$k-$j.out" --may-differ "$DIR/u$j"
		check_round "$j" "round $k, through the restarted vlmcd" "$DIR/r$k-$j.out"
	done
done

# Through a vlmcd that never saw a request: what filed holds.
"$BIN/vlmcd" --segment "$SEG" --port 3 --blocker-port 1 "${vols[@]}" --object-size 1M \
	2> "$DIR/vlmcd-fresh.log" & pids+=($!)
wait_bound 3
for j in $(seq $ROUNDS); do
	"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 3 --volume "v$j" --op read \
		--pattern rand --total-size $VOL --block-size 4K --iodepth 16 --seed "$j" \
		--verify full --timeout 30 --json --may-differ "$DIR/u$j" > "$DIR/f$j.out" 2> "$DIR/f$j.out.err"
	check_round "$j" "a fresh vlmcd" "$DIR/f$j.out"
done

# A request across two objects is split and copied, as before.
before=$(peer_stat 2 split)
"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume v1 --op read \
	--pattern seq --total-size 3M --block-size 1536K --object-size 3M --iodepth 1 --seed 1 --json \
	> "$DIR/split.out" 2> "$DIR/split.err" || true
[ "$(peer_stat 2 split)" -gt "$before" ] || fail "a request across two objects was not split"
echo "renamed $(peer_stat 2 renamed), split $(peer_stat 2 split); every acknowledged write survived $ROUNDS SIGKILLs of vlmcd: ok"
