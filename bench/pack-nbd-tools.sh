#!/usr/bin/env bash
# Packs this machine's fio and nbdkit (with its memory plugin), and perf
# where it is installed, and every library they load into one tar.xz, for a machine that has neither and
# no network (the device machine of issue 24's 16-core runs):
# bench/with-nbd-tools.sh unpacks it there and runs a command with both
# (and perf) on PATH, through the packed dynamic loader. About 23 MB
# (Debian 12's fio links librbd and ICU), 31 MB with perf.
#   bench/pack-nbd-tools.sh OUT.tar.xz
set -eu
[ $# = 1 ] || { echo "usage: $0 OUT.tar.xz" >&2; exit 2; }
out=$(realpath -m "$1")
for tool in fio nbdkit; do
	command -v $tool > /dev/null || { echo "$tool is missing: tools/install-deps" >&2; exit 1; }
done
plugin=$(find /usr/lib /usr/local/lib -name nbdkit-memory-plugin.so 2>/dev/null | head -1)
[ -n "$plugin" ] || { echo "nbdkit's memory plugin is missing" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp -L "$(command -v fio)" "$stage/bin/fio.real"
cp -L "$(command -v nbdkit)" "$stage/bin/nbdkit.real"
cp -L "$plugin" "$stage/lib/"
progs=("$stage/bin/fio.real" "$stage/bin/nbdkit.real" "$stage/lib/nbdkit-memory-plugin.so")
# perf for bench/run-lean-profile.sh (Debian's /usr/bin/perf is the binary
# itself; linux-perf)
if command -v perf > /dev/null && perf --version > /dev/null 2>&1; then
	cp -L "$(command -v perf)" "$stage/bin/perf.real"
	progs+=("$stage/bin/perf.real")
fi
# every library they load, the dynamic loader among them
for f in "${progs[@]}"; do
	ldd "$f" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'
done | sort -u | while read -r lib; do
	if [ -f "$lib" ]; then cp -L "$lib" "$stage/lib/"; fi
done
[ -f "$stage/lib/ld-linux-x86-64.so.2" ] || { echo "no ld-linux-x86-64.so.2 found" >&2; exit 1; }
tar -cJf "$out" -C "$stage" .
echo "$out: $(du -h "$out" | cut -f1), fio $(fio --version), $(nbdkit --version | head -1)$([ -f "$stage/bin/perf.real" ] && echo ", $(perf --version)")"
