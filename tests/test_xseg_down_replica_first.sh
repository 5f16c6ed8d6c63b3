#!/usr/bin/env bash
# Replicated write-back with both hosts run by `xseg up` (two segments over
# loopback, one store):
#   A: filed, synapsed --remote (5), cached primary (--mirror-port 5, plugged)
#   B: filed, cached --replica --persist (3), synapsed --listen -> 3
# `xseg down B` while the primary is mirrored and dirty (the replica holding
# its copies): the replica stopped keeping them in its persist file, as it
# should (the primary degrades and writes back), but its port kept the
# mark of a cache gone dirty, so down stopped there (exit 1, filed and
# the segment left) and every later down of B did the same, also after
# the primary had written everything back; the only way out was
# `xseg unplug --force`, which says the blocker has older data. Now a
# --replica cache with persist= whose copies stay in its file does not
# hold down: B goes down whole (exit 0, the copies said), A writes back
# on its own down, and every byte reads back straight from the store.
# A replica without persist= (its copies dropped) still stops down.
set -u
SEG_PREFIX=xseg-down-replica
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/up_lib.sh"
RUNB=$DIR/runb
trap '"$BIN/xseg" down "$DIR/a.path" --run-dir "$RUN" > /dev/null 2>&1
      "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" > /dev/null 2>&1
      for f in "$RUN"/*.pid "$RUNB"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
      cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null' EXIT
P=$(free_port)
pstat() { "$BIN/xseg" stats --segment "$1" --port 3 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }

paths() {   # REPLICA_OPTIONS
	cat > "$DIR/b.path" <<EOT
segment $SEGB ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data
peer cached port=3 blocker-port=1 cache-size=64M replica $1
peer synapsed port=2 listen=127.0.0.1:$P target-port=3 timeout=3
EOT
	cat > "$DIR/a.path" <<EOT
segment $SEG ports=16 requests=512 heap=64M
peer filed port=1 dir=$DIR/data
peer synapsed port=5 remote=127.0.0.1:$P timeout=3
peer cached port=3 blocker-port=1 cache-size=64M write-policy=writeback dirty-high=100 dirty-low=90 mirror-port=5 persist=$DIR/primary.pf plug=1
EOT
}
up_mirrored() {
	expect_exit 0 timeout 60 "$BIN/xseg" up "$DIR/b.path" --run-dir "$RUNB"
	expect_exit 0 timeout 60 "$BIN/xseg" up "$DIR/a.path" --run-dir "$RUN"
	for _ in $(seq 100); do [ "$(pstat "$SEG" mirror_state)" = mirrored ] && break; sleep 0.1; done
	[ "$(pstat "$SEG" mirror_state)" = mirrored ] || fail "the primary is $(pstat "$SEG" mirror_state)"
}
write_seed() {   # SEED
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 1 --op write --pattern rand \
		--total-size 8M --block-size 4K --iodepth 16 --seed "$1" --verify full --timeout 30 \
		--json > "$DIR/w.out" 2> "$DIR/w.err" || fail "writes: $(tail -2 "$DIR/w.err")"
	local pd rd
	pd=$(pstat "$SEG" dirty_bytes) rd=$(pstat "$SEGB" dirty_bytes)
	[ "$pd" -gt 0 ] && [ "$rd" -gt 0 ] ||
		fail "dirty: primary $pd, replica $rd: the test would prove nothing"
	echo "seed $1: the primary holds $pd dirty bytes, the replica $rd"
}
read_seed() {   # SEED SEGMENT WHAT
	"$BIN/bench-xseg" --segment "$2" --port 10 --target-port 1 --op read --pattern rand \
		--total-size 8M --block-size 4K --iodepth 16 --seed "$1" --verify full --timeout 30 \
		--json > "$DIR/r.out" 2> "$DIR/r.err" ||
		fail "$3: $(tail -1 "$DIR/r.out") $(tail -2 "$DIR/r.err")"
}

echo "--- a replica with persist=: down B first goes through"
paths "persist=$DIR/replica.pf"
up_mirrored
write_seed 3
expect_exit 0 timeout 60 "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" --timeout 20
cat "$DIR/out" "$DIR/err"
"$BIN/xseg" info --segment "$SEGB" > /dev/null 2>&1 && fail "down B left its segment"
grep -q "replica.*port 3.*replica.pf" "$DIR/out" "$DIR/err" ||
	fail "down B did not say the replica's copies stay in its file"
read_seed 3 "$SEG" "reads through the primary after B went down"
expect_exit 0 timeout 120 "$BIN/xseg" down "$DIR/a.path" --run-dir "$RUN" --timeout 60
"$BIN/xseg" create --segment "$SEGB" --ports 16 > /dev/null || fail "create for the store read"
"$BIN/filed" --segment "$SEGB" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & fpid=$!
wait_bound_in "$SEGB" 1
read_seed 3 "$SEGB" "reads straight from the store"
kill -TERM $fpid; wait $fpid
"$BIN/xseg" destroy --segment "$SEGB"

echo "--- both up again: the replica recovers its file, the primary resets it, both go down"
up_mirrored
write_seed 4
expect_exit 0 timeout 120 "$BIN/xseg" down "$DIR/a.path" --run-dir "$RUN" --timeout 60
expect_exit 0 timeout 60 "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" --timeout 20

echo "--- a replica without persist= (its copies dropped at its stop): down B still stops"
rm -f "$DIR/replica.pf"
paths ""
up_mirrored
write_seed 5
expect_exit 1 timeout 60 "$BIN/xseg" down "$DIR/b.path" --run-dir "$RUNB" --timeout 20
grep -q "gone holding" "$DIR/err" || fail "down B did not stop at the replica: $(cat "$DIR/err")"
echo "ok"
