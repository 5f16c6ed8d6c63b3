#!/usr/bin/env bash
# xseg's options: one of another subcommand was taken and dropped (`xseg up
# FILE --ports 2 --heap 1G --json --via 7` exited 0, the segment made with
# the file's sizes), though a bad argument exits 2 naming it; `create
# --mode 0` made a 0600 segment (0 stood for "not given"); and `xseg
# COMMAND --version` exited 2. Now: exit 2 naming the option, --mode 0
# refused, --version anywhere prints the version and exits 0.
set -u
SEG_PREFIX=xseg-cli-opts
. "$(dirname "$0")/lib.sh"

none=$DIR/none.path   # never read: the options are refused first
bad_arg "--ports" "$BIN/xseg" up "$none" --ports 2
bad_arg "--heap" "$BIN/xseg" up "$none" --heap 1G
bad_arg "--json" "$BIN/xseg" down "$none" --json
bad_arg "--via" "$BIN/xseg" status "$none" --via 7
bad_arg "--timeout" "$BIN/xseg" status "$none" --timeout 5
bad_arg "--port" "$BIN/xseg" create --segment "$SEG" --port 5
bad_arg "--all" "$BIN/xseg" create --segment "$SEG" --all
bad_arg "--heap" "$BIN/xseg" destroy --segment "$SEG" --heap 5G
bad_arg "--via" "$BIN/xseg" info --segment "$SEG" --via 3
bad_arg "--clear" "$BIN/xseg" plug --segment "$SEG" --port 1 --via 2 --clear
bad_arg "--force" "$BIN/xseg" stats --segment "$SEG" --force
bad_arg "--run-dir" "$BIN/xseg" info --segment "$SEG" --run-dir "$DIR"
bad_arg "'0'" "$BIN/xseg" create --segment "$SEG" --mode 0
bad_arg "'000'" "$BIN/xseg" create --segment "$SEG" --mode 000
[ -e /dev/shm/"$SEG" ] && fail "a refused create made the segment"
printf 'segment %s mode=0\npeer nulld port=1\n' "$SEG" > "$DIR/p.path"
bad_arg "$DIR/p.path:1:" "$BIN/xseg" status "$DIR/p.path"

want=$("$BIN/xseg" --version)
for c in create destroy info route plug unplug stats exporter policy promote up down status; do
	expect_exit 0 "$BIN/xseg" "$c" --version
	[ "$(cat "$DIR/out")" = "$want" ] || fail "xseg $c --version: '$(cat "$DIR/out")', not '$want'"
done
# the options of each command still go with it
expect_exit 0 "$BIN/xseg" create --segment "$SEG" --ports 4 --requests 64 --heap 8M --mode 0640
[ "$(stat -c %a /dev/shm/"$SEG")" = 640 ] || fail "--mode 0640 gave $(stat -c %a /dev/shm/"$SEG")"
expect_exit 0 "$BIN/xseg" info --segment "$SEG" --json --all
expect_exit 0 "$BIN/xseg" destroy --segment "$SEG"
echo "ok"
