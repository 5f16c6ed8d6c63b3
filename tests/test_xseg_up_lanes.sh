#!/usr/bin/env bash
# A path file's peer with lanes=N serves ports PORT..PORT+N-1 (the runtime's
# --lanes): docs/interfaces.md has "a missing or shared port" refused
# before anything starts (xseg: FILE:LINE: ..., exit 2). A peer whose port
# is another's lane, lanes that reach an earlier peer's port, or lanes that
# end past the segment's ports must be refused so; then a file whose peer
# has lanes comes up, and down stops it and removes the segment.
set -u
SEG_PREFIX=xseg-up-lanes
. "$(dirname "$0")/lib.sh"

RUN=$DIR/run
down_all() {
	for f in "$DIR"/*.path; do
		[ -f "$f" ] && "$BIN/xseg" down "$f" --run-dir "$RUN" --timeout 10 > /dev/null 2>&1
	done
	cleanup
}
trap down_all EXIT

bad=$DIR/bad.path
echo "--- a peer on another peer's lane"
printf 'segment %s ports=16\npeer nulld port=1 lanes=4\npeer nulld port=3\n' "$SEG" > "$bad"
bad_arg "$bad:3:" "$BIN/xseg" up "$bad" --run-dir "$RUN"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "up made the segment for a bad file"

echo "--- lanes over an earlier peer's port"
printf 'segment %s ports=16\npeer nulld port=4\npeer nulld port=2 lanes=3\n' "$SEG" > "$bad"
bad_arg "$bad:3:" "$BIN/xseg" up "$bad" --run-dir "$RUN"

echo "--- lanes past the segment's ports"
printf 'segment %s ports=8\npeer nulld port=6 lanes=4\n' "$SEG" > "$bad"
bad_arg "$bad:2:" "$BIN/xseg" up "$bad" --run-dir "$RUN"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "up made the segment for a bad file"

echo "--- a good file with lanes: up, status, down"
good=$DIR/good.path
printf 'segment %s ports=16\npeer nulld port=1 lanes=4\npeer nulld port=5\n' "$SEG" > "$good"
"$BIN/xseg" up "$good" --run-dir "$RUN" > "$DIR/up.out" 2>&1 || fail "up: $(cat "$DIR/up.out")"
"$BIN/xseg" status "$good" --run-dir "$RUN" > "$DIR/st.out" 2>&1 || fail "status: $(cat "$DIR/st.out")"
"$BIN/xseg" down "$good" --run-dir "$RUN" > "$DIR/down.out" 2>&1 || fail "down: $(cat "$DIR/down.out")"
"$BIN/xseg" info --segment "$SEG" > /dev/null 2>&1 && fail "down left the segment"
echo "ok"
