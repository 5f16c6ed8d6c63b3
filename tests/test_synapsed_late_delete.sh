#!/usr/bin/env bash
# A DELETE that synapsed A timed out while it was still at B's target must
# not land after the WRITE of the same object that followed it on the same
# connection. test_synapsed_late_overlap shows it for two WRITEs; B held a
# READ or WRITE behind an earlier one of its requester over the same bytes,
# but a DELETE or COPY was not counted: the WRITE went to the target at
# once, was answered, and the old DELETE (filed's unlink held 1.5 s by
# strace, A's --timeout 1) removed the object after it: the acknowledged
# WRITE was gone (ENOENT from B's store). Now the WRITE waits behind the
# DELETE (timing out at A while it does; the client writes again), and
# what A acknowledged reads back from B's store.
set -u
SEG_PREFIX=synapsed-late-delete
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
command -v strace > /dev/null || { echo "SKIP: no strace"; exit 0; }

link_ab 1

xa() { "$BIN/xreq" --segment "$SEG" --port 10 --target-port 2 --target o "$@"; }
xa --op write --size 4096 --data a > /dev/null || fail "the first WRITE through A"

strace_delay "$fpid" unlinkat 1500000   # every unlink of filed held 1.5 s
out=$(xa --op delete 2>&1)
echo "DELETE through A: $out"
case $out in *"error=110 "*) ;; *) fail "the DELETE did not time out at A: $out" ;; esac

# the client writes again until A acknowledges it
acked=0
for try in 1 2 3 4 5; do
	out=$(xa --op write --size 4096 --data b 2>&1) && { acked=$try; break; }
	echo "WRITE try $try: $out"
done
[ $acked -gt 0 ] || fail "no WRITE acknowledged in 5 tries"
echo "WRITE acknowledged at try $acked"
sleep 2   # the held unlink ends
kill "$STRACE"; wait "$STRACE" 2> /dev/null
out=$("$BIN/xreq" --segment "$SEGB" --port 11 --target-port 1 --target o --op read --size 4096 2>&1)
echo "READ straight from B's store: ${out:0:60}"
case $out in
"SERVED serviced=4096"*"data='bbbb"*) ;;
*) fail "the WRITE A acknowledged is not on B's store (the DELETE it timed out landed after it): $out" ;;
esac
grep -l "Sanitizer" "$DIR"/*.log && fail "a sanitizer reported an error (logs above)"
echo "synapsed, a timed-out DELETE still at the target: ok"
