#!/usr/bin/env bash
# Every program in $BIN from the outside: -h and --help print the same
# usage on stdout and exit 0 (xseg's subcommands too); --version prints one
# line "PROGRAM (xseg) VERSION, segment layout N" with the version of
# include/xseg/version.h and the layout a fresh segment has (xseg info);
# an unknown option still exits 2 with one stderr line naming it.
# Run by tests/run-tests.sh (BIN = the build's bin directory).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=programs-help
. tests/lib.sh

# run ARGS...: runs with a time limit; status in $rc, output in $DIR/out, $DIR/err.
run() {
	timeout 10 "$@" > "$DIR/out" 2> "$DIR/err" < /dev/null
	rc=$?
}

# helps WHAT COMMAND...: COMMAND must exit 0 with usage on stdout, nothing on stderr.
helps() {
	local what=$1; shift
	run "$@"
	[ $rc -eq 0 ] || fail "'$what' exited $rc, expected 0: $(head -3 "$DIR/err")"
	[ -s "$DIR/out" ] || fail "'$what' printed nothing on stdout"
	[ -s "$DIR/err" ] && fail "'$what' wrote on stderr: $(head -3 "$DIR/err")"
	grep -qi usage "$DIR/out" || fail "'$what': no usage on stdout: $(head -3 "$DIR/out")"
	return 0
}

# same_help WHAT COMMAND...: -h and --help, same text.
same_help() {
	local what=$1; shift
	helps "$what -h" "$@" -h
	cp "$DIR/out" "$DIR/short"
	helps "$what --help" "$@" --help
	cmp -s "$DIR/short" "$DIR/out" || fail "'$what -h' and '$what --help' print different text"
}

version=$(sed -n 's/^#define XSEG_VERSION  *"\(.*\)"$/\1/p' include/xseg/version.h)
[ -n "$version" ] || fail "no XSEG_VERSION in include/xseg/version.h"

# the layout version of a segment made now, as xseg info reports it
"$BIN/xseg" create --segment "$SEG" > /dev/null || fail "xseg create exited $?"
layout=$("$BIN/xseg" info --segment "$SEG" --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["layout_version"])') ||
	fail "xseg info --json has no layout_version"

for p in filed vlmcd sosd synapsed nbdd cached nulld xseg xreq bench-xseg ipc-bench xtypes-bench; do
	[ -x "$BIN/$p" ] || fail "$BIN/$p is missing"
done

nr=0
for exe in "$BIN"/*; do
	[ -f "$exe" ] && [ -x "$exe" ] || continue
	p=$(basename "$exe")
	nr=$((nr + 1))

	same_help "$p" "$exe"

	run "$exe" --version
	[ $rc -eq 0 ] || fail "'$p --version' exited $rc, expected 0: $(head -3 "$DIR/err")"
	[ -s "$DIR/err" ] && fail "'$p --version' wrote on stderr: $(head -3 "$DIR/err")"
	[ "$(wc -l < "$DIR/out")" -eq 1 ] ||
		fail "'$p --version': expected one line, got: $(cat "$DIR/out")"
	want="$p (xseg) $version, segment layout $layout"
	[ "$(cat "$DIR/out")" = "$want" ] ||
		fail "'$p --version' printed '$(cat "$DIR/out")', expected '$want'"

	run "$exe" --no-such-option
	[ $rc -eq 2 ] || fail "'$p --no-such-option' exited $rc, expected 2"
	[ "$(wc -l < "$DIR/err")" -eq 1 ] ||
		fail "'$p --no-such-option': expected one line on stderr, got: $(cat "$DIR/err")"
	grep -qF -- --no-such-option "$DIR/err" ||
		fail "'$p --no-such-option': stderr does not name it: $(cat "$DIR/err")"
done

# xseg's subcommands, as its usage lists them
subs=$("$BIN/xseg" --help | sed -n 's/^  xseg \([a-z][a-z]*\) .*/\1/p')
[ "$(echo "$subs" | wc -w)" -ge 8 ] || fail "xseg --help lists too few commands: $subs"
for s in $subs; do
	same_help "xseg $s" "$BIN/xseg" "$s"
	helps "xseg help $s" "$BIN/xseg" help "$s"
	cmp -s "$DIR/short" "$DIR/out" || fail "'xseg $s -h' and 'xseg help $s' differ"
done

echo "ok: $nr programs take -h, --help and --version ($version, layout $layout)"
