#!/usr/bin/env bash
# Runs a command with the fio and nbdkit (and perf, where it was packed)
# that bench/pack-nbd-tools.sh packed on another machine first on PATH (each run through the packed
# dynamic loader with the packed libraries; `nbdkit ... memory SIZE` finds
# the packed plugin). For the device machine, which has neither:
#   bench/with-nbd-tools.sh TOOLS.tar.xz JOBS=4 LANES=4 bench/run-nbdd-vs-nbdkit.sh
# (leading NAME=VALUE words are set in the command's environment).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 TOOLS.tar.xz [NAME=VALUE...] COMMAND [ARGS...]" >&2; exit 2; }
T=$(mktemp -d)
tar -xJf "$1" -C "$T"
shift
mkdir "$T/wrap"
cat > "$T/wrap/fio" <<W
#!/bin/sh
exec "$T/lib/ld-linux-x86-64.so.2" --library-path "$T/lib" "$T/bin/fio.real" "\$@"
W
cat > "$T/wrap/nbdkit" <<W
#!/usr/bin/env bash
a=(); for x in "\$@"; do [ "\$x" = memory ] && x="$T/lib/nbdkit-memory-plugin.so"; a+=("\$x"); done
exec "$T/lib/ld-linux-x86-64.so.2" --library-path "$T/lib" "$T/bin/nbdkit.real" "\${a[@]}"
W
chmod +x "$T/wrap/fio" "$T/wrap/nbdkit"
if [ -f "$T/bin/perf.real" ]; then   # packed where the packing machine had it
	cat > "$T/wrap/perf" <<W
#!/bin/sh
exec "$T/lib/ld-linux-x86-64.so.2" --library-path "$T/lib" "$T/bin/perf.real" "\$@"
W
	chmod +x "$T/wrap/perf"
fi
export PATH="$T/wrap:$PATH"
fio --version > /dev/null && nbdkit --version > /dev/null ||
	{ echo "the packed fio or nbdkit does not run here" >&2; exit 1; }
exec env "$@"
