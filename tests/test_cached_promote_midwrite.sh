#!/usr/bin/env bash
# Host A lost in the middle of a write pass, `xseg promote` on B: every
# write the primary acknowledged reads back from the store. The load is
# volume v through vlmcd on A (port 2 -> the mirrored primary), a new
# seed each pass (100, 101, ...), each pass listing the blocks no reply
# acknowledged (--unacked); --dirty-high 100: nothing goes to the store
# before the loss (checked: the store lacks the last whole pass). Every
# peer of A is SIGKILLed PROMOTE_KILL_AT seconds into a pass (default a
# random moment), its persist file removed; the writer's requests time
# out. After the promote, straight from B's filed (vlmcd port 4): the
# cut pass's acknowledged blocks are its own, the last whole pass's
# everywhere else, and no block is older than that (neither seed).
set -u
SEG_PREFIX=cached-promote-mid
MIRROR_TOTAL=${MIRROR_TOTAL:-32M}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

start=$SECONDS
mirror_start
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-a.log" & vapid=$!; pids+=($vapid)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:$MIRROR_TOTAL --object-size 4M \
	2> "$DIR/vlmcd-b.log" & pids+=($!)
wait_bound 2; wait_bound_in "$SEGB" 4

# pass SEED: one verified pass of v, its unacknowledged blocks listed.
pass() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume v --op write \
		--pattern rand --total-size "$MIRROR_TOTAL" --block-size 4K --iodepth 16 \
		--seed "$1" --verify full --timeout 3 --unacked "$DIR/unacked-$1" --json \
		> "$DIR/w-$1.out" 2> "$DIR/w-$1.err"
}
vread() {   # SEED OUT [options]: v straight from B's filed
	verified "$SEGB" 4 read "$1" "$2" --volume v "${@:3}"
}
for s in 100 101; do
	pass $s || fail "pass $s: $(tail -1 "$DIR/w-$s.out")"
	echo "pass $s: $(jfield "$DIR/w-$s.out" seconds) s"
done
last=101 cut=102
pass $cut & wp=$!
# a random moment of the pass: 10 to 60% of the last whole pass's time
t=${PROMOTE_KILL_AT:-$(python3 -c "import random; print(round($(jfield "$DIR/w-$last.out" seconds) * random.uniform(0.1, 0.6), 3))")}
sleep "$t"
pd=$(pstat dirty_bytes) rd=$(rstat dirty_bytes) ms=$(pstat mirror_state)
# the loss at once after the check (each stats call takes a while)
kill -0 $wp 2>/dev/null || fail "pass $cut ended within $t s: no write in flight at the loss"
kill -KILL "$cpid" "$spid" "$bapid" "$vapid"
echo "--- host A lost $t s into pass $cut: primary dirty $pd, replica dirty $rd, $ms (just before)"
[ "$pd" -gt 0 ] || fail "the primary holds nothing dirty: nothing at risk"
wait "$cpid" "$spid" "$bapid" "$vapid" 2>/dev/null
rm -f "$PRIMARY_PF"
wait $wp && fail "pass $cut passed with host A lost under it"
acked=$(( $(jfield "$DIR/w-$cut.out" requests) ))
[ -e "$DIR/unacked-$cut" ] || fail "pass $cut wrote no --unacked list: $(tail -3 "$DIR/w-$cut.err")"
echo "pass $cut: $(jfield "$DIR/w-$cut.out" unacked) of $((${MIRROR_TOTAL%M} * 256)) blocks unacknowledged ($acked requests)"
vread $last "$DIR/before.out"
c=$(jfield "$DIR/before.out" corrupted)
echo "straight from the store before promote: $c of $((${MIRROR_TOTAL%M} * 256)) blocks not seed $last's"
[ "$c" -gt 0 ] || fail "the store holds seed $last already: nothing was at risk"

timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
echo "promote: $(cat "$DIR/promote.out")"
[ "$(rstat dirty_bytes)" = 0 ] || fail "$(rstat dirty_bytes) bytes still dirty after promote"

vread $cut "$DIR/cut.out" --may-differ "$DIR/unacked-$cut" --differing "$DIR/d-$cut"
intact "$DIR/cut.out" "pass $cut's acknowledged blocks straight from B's filed after promote"
vread $last "$DIR/last.out" --differing "$DIR/d-$last"
python3 - "$DIR/d-$cut" "$DIR/d-$last" <<'EOF' || fail "blocks older than both passes after the promote"
import sys
def blocks(p):
    s = set()
    for line in open(p).read().splitlines()[1:]:
        f, n = map(int, line.split())
        s.update(range(f, f + n))
    return s
a, b = blocks(sys.argv[1]), blocks(sys.argv[2])
both = sorted(a & b)
print(f"{len(a)} blocks not of the cut pass, {len(b)} not of the last whole pass, {len(both)} of neither")
sys.exit(1 if both else 0)
EOF
mirror_sanitizers
echo "PASS ($((SECONDS - start)) s)"
