#!/usr/bin/env bash
# `xseg plug --port 3 --via 4` (cache 4 in front of cache 3, itself in
# front of filed on port 1) while `xseg unplug --via 3` runs. Cache 4
# checks at "plug 3" that port 3 is in its blocker's chain; if the unplug
# splices 3 out between that answer and the tool's route move, the tool
# routed 3 -> 4 outside any path: port 1 routed straight to filed, and
# the plug still exited 0 (cache 4 said "plugged"), so the operator was
# told a cache caches port 1 that never sees its requests, and the route
# 3 -> 4 was left behind. Now cache 4 refuses "plugged" when no hop of
# its blocker's chain routes to it (ENOLINK), and the tool routes 3 back
# and exits 1. gdb stops the plug at its route move, where the unplug is
# run, so the order is certain. Skipped without gdb, or where it cannot
# run the tool.
set -u
SEG_PREFIX=xseg-plug-front-unplugged
. "$(dirname "$0")/lib.sh"

command -v gdb > /dev/null || { echo "SKIP: no gdb"; exit 0; }
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
for p in 3 4; do
	"$BIN/cached" --segment "$SEG" --port "$p" --blocker-port 1 --cache-size 8M \
		--object-size 1M 2>> "$DIR/cached$p.log" & pids+=($!)
	wait_bound "$p"
done
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug 1 via 3"

# The plug's first route change is its move of port 3's route; the
# unplug of 3 runs there, after cache 4 has answered "plug 3".
timeout 120 gdb -q -batch -nx -ex 'set breakpoint pending on' \
	-ex 'break xseg_replace_next_hop' -ex run \
	-ex "shell timeout 60 '$BIN/xseg' unplug --segment '$SEG' --via 3 > '$DIR/unplug.out' 2>&1; echo \$? > '$DIR/unplug.rc'" \
	-ex 'delete' -ex continue -ex 'print $_exitcode' \
	--args "$BIN/xseg" plug --segment "$SEG" --port 3 --via 4 > "$DIR/gdb.out" 2>&1
rc=$(sed -n 's/^\$1 = //p' "$DIR/gdb.out")
case "$rc" in
[0-9]*) ;;
*) echo "SKIP: gdb could not run xseg plug to its route move: $(tail -3 "$DIR/gdb.out")"; exit 0 ;;
esac
[ -e "$DIR/unplug.rc" ] ||
	{ echo "SKIP: gdb did not stop xseg plug at its route move: $(tail -3 "$DIR/gdb.out")"; exit 0; }
[ "$(cat "$DIR/unplug.rc")" = 0 ] ||
	fail "the unplug of 3 during the plug failed: $(cat "$DIR/unplug.out" 2>/dev/null)"
h1=$(port_info 1 next_hop) h3=$(port_info 3 next_hop) h4=$(port_info 4 next_hop)
[ "$rc" != 0 ] || fail "xseg plug --port 3 --via 4 exited 0 while port 3 left the path" \
	"(routes 1 -> $h1, 3 -> $h3, 4 -> $h4): cache 4 caches nothing of port 1"
grep -q "left the path" "$DIR/gdb.out" || fail "the plug did not say why it failed: $(cat "$DIR/gdb.out")"
[ "$h1$h3$h4" = NoneNoneNone ] || fail "routes left: 1 -> $h1, 3 -> $h3, 4 -> $h4"
# the cache can be plugged properly afterwards
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 4 || fail "plug 1 via 4 after the refusal"
[ "$(port_info 1 next_hop)" = 4 ] || fail "port 1 does not route to 4"
echo "a plug in front of a port unplugged meanwhile fails and leaves no route: ok"
