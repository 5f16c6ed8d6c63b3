#!/usr/bin/env bash
# `xseg promote` of a replica whose primary is still alive and mirroring
# (the operator took host A for lost; it was not): the promoted cache
# must not take the primary's later mirror writes as its own dirty data.
# W2, mirrored after the promote, landed in the promoted cache as an
# ordinary write-back write; the primary wrote W2 back and, degraded (its
# cleans and resets refused now), wrote W3 over it straight to the store.
# The promoted cache's stop then wrote W2's older bytes over W3, an
# acknowledged write.
set -u
SEG_PREFIX=cached-promote-live
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

mirror_start

out=$(xq "$SEG" 10 3 --op write --target obj --size 4K --data A --timeout 30)
[ "${out%% *}" = SERVED ] || fail "W1: $out"
timeout 60 "$BIN/xseg" promote --segment "$SEGB" --port 3 > "$DIR/promote.out" 2>&1 ||
	fail "xseg promote: $(cat "$DIR/promote.out")"
echo "promoted while the primary is $(pstat mirror_state)"

echo "--- W2: 4K of 'B' at 0 through the primary"
out=$(xq "$SEG" 11 3 --op write --target obj --size 4K --data B --timeout 30)
echo "W2: $out (primary $(pstat mirror_state); promoted cache dirty $(rstat dirty_bytes))"
# the primary writes W2 back (its clean to the promoted cache is refused)
"$BIN/xseg" policy --segment "$SEG" --port 3 --set writethrough || fail "policy writethrough"
sleep 0.5
echo "--- W3: 4K of 'C' at 0 through the primary ($(pstat mirror_state))"
out=$(xq "$SEG" 12 3 --op write --target obj --size 4K --data C --timeout 30)
[ "${out%% *}" = SERVED ] || fail "W3: $out"

echo "--- the promoted cache stops"
kill -TERM "$rpid"
wait "$rpid" 2>/dev/null
out=$(xq "$SEG" 13 1 --op read --target obj --size 8 --timeout 10)
echo "the first 8 bytes in the store: $out"
[ "$out" = "SERVED serviced=8 data='CCCCCCCC'" ] ||
	fail "W3, acknowledged, is lost: the store holds '$out' (the promoted cache wrote the primary's older mirrored W2 back over it)"
mirror_sanitizers
echo "PASS"
