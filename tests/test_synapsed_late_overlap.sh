#!/usr/bin/env bash
# A WRITE that synapsed A timed out while it was still at B's target must
# not land after the newer WRITE of the same bytes that followed it on the
# same connection. A's --timeout is the operator's, not the client's: the
# client (here vlmcd, for bench-xseg) is told ETIMEDOUT, the link stays up
# (B answers other requests), and the client writes the bytes again. B
# submitted both in arrival order, but its target (filed, two workers) ran
# them at once: the old one landed last, over the newer one A had answered
# as done (4 blocks of 256 here). The same happens when B or its target
# stalls past A's --timeout and resumes before A closes the link (3 x
# --timeout). Now B holds a READ or WRITE of a requester while an earlier
# one of the same requester over the same bytes is at the target, as it did
# already for the requester's older connections (epochs.c).
#   One of filed's two workers is slowed (its pwrites held 1.5 s by strace,
# A's --timeout 1); seed 2 is written over volume v through vlmcd on A
# (some of its writes time out at A while that worker holds them), then
# seed 3 at once; then the worker is let go. Seed 3 straight from B's store
# must read back wherever A acknowledged it (--may-differ: its own unacked
# blocks).
set -u
SEG_PREFIX=synapsed-late-overlap
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }

link_ab 1
"$BIN/vlmcd" --segment "$SEG" --port 3 --blocker-port 2 --volume v:1M 2> "$DIR/vlmcd-a.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEGB" --port 4 --blocker-port 1 --volume v:1M 2> "$DIR/vlmcd-b.log" &
pids+=($!)
wait_bound 3; wait_bound_in "$SEGB" 4

bench() {   # SEG PORT TARGET_PORT OP SEED EXTRA...
	"$BIN/bench-xseg" --segment "$1" --port "$2" --target-port "$3" --op "$4" --seed "$5" \
		--volume v --pattern rand --total-size 1M --block-size 4K --iodepth 16 \
		--verify full --timeout 30 --json "${@:6}" > "$DIR/$4-$5.out" 2> "$DIR/$4-$5.err"
}
bench "$SEG" 10 3 write 1 || fail "seed 1: $(tail -1 "$DIR/write-1.out")"

# filed's second worker slow: every pwrite of it held 1.5 s
wt=$(grep -l '^filed-w1$' /proc/"$fpid"/task/*/comm | head -1 | cut -d/ -f5)
[ -n "$wt" ] || fail "no filed-w1 thread in $(cat /proc/"$fpid"/task/*/comm | tr '\n' ' ')"
strace -qq -p "$wt" -e trace=pwrite64 -e inject=pwrite64:delay_enter=1500000 -o /dev/null \
	2> "$DIR/strace.log" & st=$!; pids+=($st)
for _ in $(seq 100); do
	grep -q '^TracerPid:[[:space:]]*0$' /proc/"$fpid"/task/"$wt"/status || break
	sleep 0.05
done
grep -q '^TracerPid:[[:space:]]*0$' /proc/"$fpid"/task/"$wt"/status &&
	{ echo "SKIP: strace cannot attach: $(cat "$DIR/strace.log")"; exit 0; }
sleep 0.5

bench "$SEG" 10 3 write 2 --unacked "$DIR/un-2"
f2=$(json "$DIR/write-2.out" failed)
echo "seed 2: $f2 of 256 writes failed (timed out at A, held by filed's slow worker)"
[ "$f2" -ge 1 ] || fail "no write of seed 2 timed out: the test shows nothing"
bench "$SEG" 10 3 write 3 --unacked "$DIR/un-3"
echo "seed 3: $(json "$DIR/write-3.out" failed) of 256 writes failed"
kill "$st"; wait "$st" 2>/dev/null
sleep 1   # the held pwrites go on once strace lets go
bench "$SEGB" 11 4 read 3 --may-differ "$DIR/un-3"
c=$(json "$DIR/read-3.out" corrupted) f=$(json "$DIR/read-3.out" failed)
echo "seed 3 straight from B's store: $c acknowledged blocks wrong, $f failed"
[ "$c" = 0 ] && [ "$f" = 0 ] ||
	fail "seed 3 from B's store: $c acknowledged blocks hold older data (a write A timed out landed after them), $f failed"
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, a timed-out write still at the target: ok"
