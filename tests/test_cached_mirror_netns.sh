#!/usr/bin/env bash
# Replicated write-back (issue 23) between two "hosts": the primary's
# synapsed and the replica's in two network namespaces joined by a veth
# pair made here (the segments stay shared memory of this machine, the
# mirrored writes cross the veth pair), as test_synapsed_netns.sh sets
# them up. Phase (a) of test_cached_mirror.sh: a verified mirrored write
# load, every peer of A SIGKILLed and the primary's persist file removed,
# filed lacks the data, `xseg promote` on B, every byte straight from B's
# filed. Skipped, with a message, where namespaces cannot be made.
set -u
SEG_PREFIX=cached-mirror-netns
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/synapsed_lib.sh"
. "$(dirname "$0")/cached_mirror_lib.sh"

netns_pair cmi c
RUN_A="ip netns exec $NSA" RUN_B="ip netns exec $NSB"
LISTEN=$NET.2:7000 REMOTE=$NET.2:7000

start=$SECONDS
mirror_start
wait_log "$DIR/synapsed-b.log" "connection from $NET.1:"
host_a_lost 1
mirror_sanitizers
echo "replicated write-back across namespaces: ok ($((SECONDS - start)) s)"
