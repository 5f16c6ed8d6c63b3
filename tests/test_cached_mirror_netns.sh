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

NSA=cmi-a-$$ NSB=cmi-b-$$ VA=ca$$ VB=cb$$
NET=10.$((200 + $$ % 50)).$(( ($$ / 50) % 250 ))
trap 'cleanup; "$BIN/xseg" destroy --segment "$SEGB" 2>/dev/null;
      ip netns del "$NSA" 2>/dev/null; ip netns del "$NSB" 2>/dev/null' EXIT
if ! command -v ip > /dev/null || ! ip netns add "$NSA" 2> "$DIR/ns.err"; then
	echo "SKIP: cannot make network namespaces here (needs root and iproute2): $(cat "$DIR/ns.err" 2>/dev/null)"
	exit 0
fi
setup_veth() {
	ip netns add "$NSB" && ip link add "$VA" type veth peer name "$VB" &&
	ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
	ip -n "$NSA" addr add "$NET.1/24" dev "$VA" && ip -n "$NSB" addr add "$NET.2/24" dev "$VB" &&
	ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up &&
	ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up
}
setup_veth 2> "$DIR/ns.err" || {
	echo "SKIP: namespaces, but no veth pair here: $(cat "$DIR/ns.err")"
	exit 0
}
RUN_A="ip netns exec $NSA" RUN_B="ip netns exec $NSB"
LISTEN=$NET.2:7000 REMOTE=$NET.2:7000

start=$SECONDS
mirror_start
wait_log "$DIR/synapsed-b.log" "connection from $NET.1:"
host_a_lost 1
mirror_sanitizers
echo "replicated write-back across namespaces: ok ($((SECONDS - start)) s)"
