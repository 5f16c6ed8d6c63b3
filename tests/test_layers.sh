#!/usr/bin/env bash
# Every folder of C sources is a one-way stack (issue 21): no call or
# include circle between the files of a folder, and no folder includes the
# headers of one above it (tools/check-layers). First the checker is shown
# a small tree with each kind of fault, so a checker that sees nothing
# cannot pass; then it runs on the project, with its allow list.
set -u
SEG_PREFIX=layers
. "$(dirname "$0")/lib.sh"
ROOT=$PWD
CHECK=$ROOT/tools/check-layers
ALLOW=$ROOT/tools/check-layers.allow

# expect_fault NAME TEXT: the checker fails on tree $DIR/NAME, naming TEXT.
expect_fault() {
	local out
	out=$("$CHECK" "$DIR/$1") && fail "$1: check-layers passed: $out"
	grep -qF -- "$2" <<<"$out" || fail "$1: expected '$2' in: $out"
	echo "ok: $1: $(head -1 <<<"$out")"
}

echo "--- the checker sees each kind of fault"
# Two files that call each other; the member s->f and .f = are no calls.
mkdir -p "$DIR/calls/peers/p"
cat > "$DIR/calls/peers/p/low.c" <<'EOF'
int high_hook(int x);
struct ops { int (*low_get)(int); };
int low_get(int x) { return high_hook(x) + 1; }
EOF
cat > "$DIR/calls/peers/p/high.c" <<'EOF'
int low_get(int x);
int high_hook(int x) { return x; }
static int use(void) { return low_get(2); }
EOF
expect_fault calls "peers/p: call circle: high.c -> low.c (low_get) -> high.c (high_hook)"

# The same through an ops struct: clean.
mkdir -p "$DIR/ops/peers/p"
cat > "$DIR/ops/peers/p/low.c" <<'EOF'
struct ops { int (*high_hook)(int); };
static const struct ops *up;
int low_get(int x) { return up->high_hook(x) + 1; }
EOF
cat > "$DIR/ops/peers/p/high.c" <<'EOF'
struct ops { int (*high_hook)(int); };
int low_get(int x);
int high_hook(int x) { return x; }
static const struct ops o = { .high_hook = high_hook };
static int use(void) { return low_get(2) + (o.high_hook != 0); }
EOF
"$CHECK" "$DIR/ops" >/dev/null || fail "ops: a call up through a struct counted: $("$CHECK" "$DIR/ops")"

mkdir -p "$DIR/includes/tools/t"
echo '#include "b.h"' > "$DIR/includes/tools/t/a.h"
echo '#include "a.h"' > "$DIR/includes/tools/t/b.h"
expect_fault includes "tools/t: include circle: a.h -> b.h -> a.h"

mkdir -p "$DIR/upward/src" "$DIR/upward/include/peer"
echo '#include "peer/peer.h"' > "$DIR/upward/src/x.c"
: > "$DIR/upward/include/peer/peer.h"
expect_fault upward "src: src/x.c includes include/peer/peer.h, of peers/runtime, which is not below it"

mkdir -p "$DIR/sideways/peers/a" "$DIR/sideways/peers/b"
echo '#include "../b/b.h"' > "$DIR/sideways/peers/a/a.c"
: > "$DIR/sideways/peers/b/b.h"
expect_fault sideways "peers/a: peers/a/a.c includes peers/b/b.h, of peers/b, which is not below it"

# An allowed circle passes; an allow line with no circle left fails.
printf 'peers/p  pending a split\n' > "$DIR/allow"
"$CHECK" --allow "$DIR/allow" "$DIR/calls" >/dev/null ||
	fail "allowed circle failed: $("$CHECK" --allow "$DIR/allow" "$DIR/calls")"
out=$("$CHECK" --allow "$DIR/allow" "$DIR/ops") && fail "stale allow line passed: $out"
grep -qF "on the allow list but has no circle any more" <<<"$out" || fail "stale: $out"

echo "--- the project"
args=()
[ -f "$ALLOW" ] && args=(--allow "$ALLOW")
out=$("$CHECK" "${args[@]}" "$ROOT") || fail "$out"
echo "$out"
echo "PASS"
