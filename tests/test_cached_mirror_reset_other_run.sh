#!/usr/bin/env bash
# A mirror-reset of an EARLIER run of the primary (a primary restarted; the
# old run's reset held on the way, as test_cached_mirror_late_reset.sh holds
# one in synapsed B, here delivered with xreq) reached the replica after
# the current run's reset and writes: a reset of another run was always
# taken ("a primary restarted"), so it dropped what the current run had
# mirrored, while the primary stayed mirrored; host A lost, the promote
# found nothing (found by review). A run is now the primary's start time,
# and a reset of an earlier run is refused (ESTALE). Verified: the data at
# risk (dirty on both), the refusal, the replica's copy kept, and after
# host A's loss every acknowledged byte reads back from B's blocker.
set -u
SEG_PREFIX=cached-mirror-reset-run
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

MIRROR_TOTAL=2M
mirror_start
verified_ok "$SEG" 3 write 1 "$DIR/write.out"
rd=$(rstat dirty_bytes)
[ "$rd" -gt 0 ] || fail "the replica holds nothing dirty after the mirrored writes"
resets=$(rstat replica_resets)
m=$(rstat mirror_marker)

echo "--- a late reset of an earlier run of the primary reaches the replica"
out=$(xq "$SEGB" 12 3 --op control --data "mirror-reset @1234abcd.7 $m" --timeout 10) &&
	fail "the replica took a reset of an earlier run of its primary: $out"
echo "$out" | grep -q "error=116 " || fail "the late reset was not refused ESTALE: $out"
[ "$(rstat replica_resets)" = "$resets" ] || fail "the replica counted the late reset as taken"
[ "$(rstat dirty_bytes)" = "$rd" ] ||
	fail "the late reset dropped the replica's copy: $rd -> $(rstat dirty_bytes) dirty bytes"
lose_host_a 1
echo "a reset of an earlier run is refused, the replica's copy kept: ok"
