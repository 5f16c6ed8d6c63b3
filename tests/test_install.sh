#!/usr/bin/env bash
# make install / make uninstall into a scratch DESTDIR: libxseg.so carries
# its SONAME (libxseg.so.MAJOR, from XSEG_ABI_VERSION) with the dev link;
# a peer written out of tree builds with pkg-config's libpeer against the
# installed headers and libraries alone, prints its usage and serves a
# PING on a segment the installed xseg made; uninstall removes exactly
# what install put (files of others in the same folders stay).
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=install
. tests/lib.sh
BUILD=${BUILD:-build}
SANITIZE=${SANITIZE:-}
command -v readelf > /dev/null || { echo "SKIP: readelf (binutils) is not installed"; exit 0; }

ROOT=$DIR/root
PREFIX=/opt/xseg-test
P=$ROOT$PREFIX
abi=$(sed -n 's/^#define XSEG_ABI_VERSION  *"\(.*\)"$/\1/p' include/xseg/version.h)
[ -n "$abi" ] || fail "no XSEG_ABI_VERSION in include/xseg/version.h"
soname=libxseg.so.${abi%%.*}

mk() { make -s --no-print-directory BUILD="$BUILD" SANITIZE="$SANITIZE" PREFIX=$PREFIX DESTDIR="$ROOT" "$@"; }

# Someone else's files in the same folders: uninstall must leave them.
mkdir -p "$P/lib" "$P/include" "$P/bin"
touch "$P/lib/libother.so.3" "$P/include/other.h" "$P/bin/other"

mk install > "$DIR/install.log" 2>&1 || { cat "$DIR/install.log"; fail "make install failed"; }

# The library: real file, SONAME link, dev link; SONAME inside.
[ -f "$P/lib/libxseg.so.$abi" ] && [ ! -L "$P/lib/libxseg.so.$abi" ] ||
	fail "no file $P/lib/libxseg.so.$abi"
[ "$(readlink "$P/lib/$soname")" = "libxseg.so.$abi" ] ||
	fail "$soname should link to libxseg.so.$abi, links to '$(readlink "$P/lib/$soname")'"
[ "$(readlink "$P/lib/libxseg.so")" = "$soname" ] ||
	fail "libxseg.so should link to $soname, links to '$(readlink "$P/lib/libxseg.so")'"
got=$(readelf -d "$P/lib/libxseg.so.$abi" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$got" = "$soname" ] || fail "SONAME of libxseg.so.$abi is '$got', expected $soname"
for f in lib/libxseg.a lib/libpeer.a include/xseg/xseg.h include/peer/peer.h \
	 include/xtypes/xwork.h lib/pkgconfig/libxseg.pc lib/pkgconfig/libpeer.pc \
	 bin/filed bin/xseg lib/systemd/system/xseg-path@.service; do
	[ -e "$P/$f" ] || fail "make install did not install $f"
done
grep -q "^prefix=$PREFIX\$" "$P/lib/pkgconfig/libpeer.pc" || fail "libpeer.pc: prefix is not $PREFIX"

# A peer out of tree: answers everything, like nulld.
mkdir -p "$DIR/src"
cat > "$DIR/src/tinyd.c" <<'C'
#include <peer/peer.h>

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	req->serviced = req->size;
	peer_complete(t, req);
}

int main(int argc, char **argv)
{
	static const struct peer_ops ops = {
		.name = "tinyd",
		.summary = "An out-of-tree peer: answers every request.",
		.on_request = on_request,
	};
	return peer_main(argc, argv, &ops, NULL);
}
C
case $SANITIZE in
address) san=-fsanitize=address,undefined ;;
thread) san=-fsanitize=thread ;;
*) san= ;;
esac
export PKG_CONFIG_PATH=$P/lib/pkgconfig
pcflags=$(pkg-config --define-variable=prefix="$P" --cflags --libs libpeer) ||
	fail "pkg-config libpeer failed"
# -nostdinc would be too much; the source tree must simply not be on the path.
cc -std=c11 -Wall -Wextra -Werror $san -o "$DIR/src/tinyd" "$DIR/src/tinyd.c" $pcflags \
	> "$DIR/cc.log" 2>&1 || { cat "$DIR/cc.log"; fail "the out-of-tree peer does not build: cc ... $pcflags"; }
readelf -d "$DIR/src/tinyd" | grep -q "(NEEDED).*\[$soname\]" ||
	fail "tinyd does not need $soname: $(readelf -d "$DIR/src/tinyd" | grep NEEDED)"
export LD_LIBRARY_PATH=$P/lib
"$DIR/src/tinyd" -h > "$DIR/out" 2> "$DIR/err" || fail "tinyd -h exited $?: $(cat "$DIR/err")"
grep -q "out-of-tree peer" "$DIR/out" || fail "tinyd -h: no usage: $(head -3 "$DIR/out")"

# And it serves: a segment by the installed xseg, a PING by the installed xreq.
BIN=$P/bin
"$BIN/xseg" create --segment "$SEG" --ports 4 --requests 64 > /dev/null ||
	fail "installed xseg create failed"
"$DIR/src/tinyd" --segment "$SEG" --port 1 2> "$DIR/tinyd.log" & pids+=($!)
wait_bound 1
"$BIN/xreq" --segment "$SEG" --port 2 --target-port 1 --op ping > "$DIR/out" 2>&1 ||
	fail "PING to the out-of-tree peer: $(cat "$DIR/out")"
stop_peers
pids=()
"$BIN/xseg" destroy --segment "$SEG" || fail "installed xseg destroy failed"
BIN=$PWD/$BUILD/bin   # for lib.sh's cleanup, once uninstalled

mk uninstall > "$DIR/uninstall.log" 2>&1 || { cat "$DIR/uninstall.log"; fail "make uninstall failed"; }
left=$(cd "$ROOT" && find . \( -type f -o -type l \) | sort)
want=$(printf '%s\n' ".$PREFIX/bin/other" ".$PREFIX/include/other.h" ".$PREFIX/lib/libother.so.3" | sort)
[ "$left" = "$want" ] || fail "after make uninstall, expected only the others' files, found: $left"
for d in xseg xtypes peer; do
	[ -e "$P/include/$d" ] && fail "make uninstall left $PREFIX/include/$d"
done
echo "ok: install, SONAME $soname, an out-of-tree peer, uninstall"
