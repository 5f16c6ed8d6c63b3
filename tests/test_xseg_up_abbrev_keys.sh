#!/usr/bin/env bash
# A path file's key that abbreviates one xseg checks or sets: the peer's
# getopt_long takes an unambiguous prefix (di=data is --dir=data), so the
# refusal of a relative dir= was passed by di=data (objects written under
# whatever directory xseg up ran in), seg= moved a peer to another segment
# past xseg's own --segment, and so on. Now any proper prefix of such a key
# exits 2 naming FILE:LINE and the whole key; whole keys that are real
# options (volume=, a prefix of volumes-file=) are fine.
set -u
SEG_PREFIX=xseg-abbrev
. "$(dirname "$0")/lib.sh"

f=$DIR/p.path
# the old build started what it accepted: whatever runs goes down
. "$(dirname "$0")/up_lib.sh"
# refused WORD WHOLE: a filed line with WORD exits 2 naming line 2 and WHOLE
refused() {
	printf 'segment %s ports=16\npeer filed port=1 dir=%s %s\n' "$SEG" "$DIR/data" "$1" > "$f"
	for c in up down status; do
		bad_arg "$f:2:" "$BIN/xseg" "$c" "$f" --run-dir "$DIR/run"
		grep -q "'$1'.*($2)" "$DIR/err" || fail "$c: '$1' not said to abbreviate $2: $(cat "$DIR/err")"
	done
}
refused di=data dir
refused pers=c.persist persist
refused volumes=v.conf volumes-file
refused seg=other segment
refused pidf=/tmp/p pidfile
refused lane=4 lanes
refused blocker=9 blocker-port
# whole keys, a real option that is a prefix of one of them: read fine
printf 'segment %s ports=16\npeer filed port=1 dir=%s\npeer vlmcd port=2 blocker-port=1 volume=v:8M\n' "$SEG" "$DIR/data" > "$f"
expect_exit 1 "$BIN/xseg" status "$f" --run-dir "$DIR/run"
[ -e /dev/shm/"$SEG" ] && fail "a bad file made the segment"
echo "ok"
