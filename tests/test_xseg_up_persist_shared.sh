#!/usr/bin/env bash
# Two caches of one path file on one persist file would overwrite each
# other's dirty data: the file must be refused as a bad file (xseg:
# FILE:LINE: ..., exit 2) before anything starts, by the same name or by
# another name of the same file; not left to the second cache's start
# (exit 1, once filed and the first cache ran, and with dirty data in the
# file its port left marked and the segment kept).
set -u
SEG_PREFIX=xseg-up-pshared
. "$(dirname "$0")/lib.sh"

RUN=$DIR/run
trap '"$BIN/xseg" down "$DIR/bad.path" --run-dir "$RUN" --timeout 10 > /dev/null 2>&1; cleanup' EXIT
bad=$DIR/bad.path
cache() {   # cache PORT BLOCKER PLUG FILE
	echo "peer cached port=$1 blocker-port=$2 cache-size=16M object-size=1M persist=$4 plug=$3"
}
{
	echo "segment $SEG ports=16"
	echo "peer filed port=1 dir=$DIR/d1"
	echo "peer filed port=2 dir=$DIR/d2"
	cache 3 1 1 "$DIR/c.pf"
	cache 4 2 2 "$DIR/c.pf"
} > "$bad"
echo "--- one persist file named twice"
bad_arg "$bad:5:" "$BIN/xseg" up "$bad" --run-dir "$RUN"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "up made the segment for a bad file"
[ -e "$RUN/1-filed.log" ] && fail "up started filed for a bad file"

echo "--- the same file by another name"
: > "$DIR/c.pf"
ln -s "$DIR/c.pf" "$DIR/link.pf"
{
	echo "segment $SEG ports=16"
	echo "peer filed port=1 dir=$DIR/d1"
	echo "peer filed port=2 dir=$DIR/d2"
	cache 3 1 1 "$DIR/c.pf"
	cache 4 2 2 "$DIR/link.pf"
} > "$bad"
bad_arg "$bad:5:" "$BIN/xseg" status "$bad" --run-dir "$RUN"
echo "ok"
