#!/usr/bin/env bash
# The per-peer units of tools/systemd/, as installed, run the way systemd
# runs them (no systemd needed; this machine's may not be PID 1): each
# ExecStart line with %i the segment and $VARs from an EnvironmentFile,
# started in After= order once the one before said READY=1 (Type=notify),
# cached's ExecStartPost plugging it; writes through vlmcd leave cached
# dirty; then SIGTERM to each in the reverse order, each waited for and
# exiting 0, the segment unit's ExecStop last. A fresh filed then serves
# every byte: the stop order drained the cache into the blocker.
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=sdunits
. tests/lib.sh
BUILD=${BUILD:-build}
command -v python3 > /dev/null || fail "python3 is needed (tools/install-deps installs it)"

P=$DIR/prefix
make -s --no-print-directory BUILD="$BUILD" SANITIZE="${SANITIZE:-}" PREFIX="$P" install \
	> "$DIR/install.log" 2>&1 || { cat "$DIR/install.log"; fail "make install PREFIX=$P failed"; }
units=$P/lib/systemd/system

env=$DIR/$SEG.env
cat > "$env" <<EOT
# as /etc/xseg/$SEG.env would be
XSEG_SEGMENT_ARGS="--ports 16 --requests 1024 --heap 128M"
FILED_ARGS="--port 1 --dir $DIR/data --threads 2"
CACHED_ARGS="--port 3 --blocker-port 1 --cache-size 64M --write-policy writeback --threads 2"
CACHED_PLUG="--port 1 --via 3"
VLMCD_ARGS="--port 2 --blocker-port 1 --volume vol1:64M"
EOT
mkdir -p "$DIR/data"
set -a; . "$env"; set +a   # EnvironmentFile=: the service's environment

# unit_cmd UNIT KEY: argv of UNIT's KEY= line (first one) into $argv, as
# systemd makes it: %i the segment, $VAR split into words, $$ a '$'.
unit_cmd() {
	local f=$units/${1/@$SEG./@.} line
	grep -q "^EnvironmentFile=/etc/xseg/%i.env$" "$f" || fail "$1 does not read /etc/xseg/%i.env"
	line=$(sed -n "s/^$2=//p" "$f" | head -1)
	[ -n "$line" ] || return 1
	line=${line//%i/$SEG}
	line=${line//\$\$/\$}
	eval "argv=($line)"
}

sock=$DIR/notify.sock
python3 tests/support/notify_listener.py "$sock" "$BIN/xseg" "$SEG" >> "$DIR/notify.log" \
	2> "$DIR/listen.log" &
pids+=($!)
for _ in $(seq 100); do [ -e "$sock.ready" ] && break; sleep 0.05; done
[ -e "$sock.ready" ] || fail "the python3 listener did not start: $(cat "$DIR/listen.log")"

# wait_from PID WORD: the datagram holding WORD that PID sent (10 s).
wait_from() {
	for _ in $(seq 200); do
		grep -m1 "^pid=$1 .*$2" "$DIR/notify.log" && return 0
		sleep 0.05
	done
	fail "no $2 from pid $1; NOTIFY_SOCKET got: $(cat "$DIR/notify.log")"
}

echo "--- start: the segment, then each peer after those it is After="
unit_cmd "xseg-segment@$SEG.service" ExecStart || fail "xseg-segment@ has no ExecStart"
"${argv[@]}" > /dev/null || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
want=(filed cached vlmcd)
order=()
declare -A pid_of
while [ ${#order[@]} -lt ${#want[@]} ]; do
	progress=0
	for k in "${want[@]}"; do
		[ -n "${pid_of[$k]:-}" ] && continue
		ready=1   # every unit it is After= that we run has started
		for o in "${want[@]}"; do
			[ "$o" = "$k" ] || [ -n "${pid_of[$o]:-}" ] && continue
			grep -q "^After=.* xseg-$o@%i.service" "$units/xseg-$k@.service" && ready=0
		done
		[ $ready = 1 ] || continue
		unit_cmd "xseg-$k@$SEG.service" ExecStart || fail "xseg-$k@ has no ExecStart"
		NOTIFY_SOCKET=$sock "${argv[@]}" 2> "$DIR/$k.log" &
		pid_of[$k]=$!
		pids+=($!)
		line=$(wait_from "${pid_of[$k]}" READY=1)
		case $line in *" bound=yes "*) ;; *) fail "$k: READY=1 without its port bound: $line" ;; esac
		if unit_cmd "xseg-$k@$SEG.service" ExecStartPost; then
			"${argv[@]}" > "$DIR/post.out" 2>&1 ||
				fail "xseg-$k@ ExecStartPost '${argv[*]}': $(cat "$DIR/post.out")"
		fi
		order+=("$k")
		progress=1
	done
	[ $progress = 1 ] || fail "the units' After= lines form a circle among ${want[*]}"
done
echo "started: ${order[*]}"
"$BIN/xseg" info --segment "$SEG" --json | grep -q '"port":1,[^}]*"next_hop":3' ||
	fail "CACHED_PLUG did not plug cached in front of port 1: $("$BIN/xseg" info --segment "$SEG")"

bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol1 \
		--total-size 32M --block-size 4K --iodepth 16 --seed 7 --verify full "$@" \
		> "$DIR/bench.log" 2>&1 || { cat "$DIR/bench.log"; fail "bench-xseg $* failed"; }
}
bench --op write --pattern rand
dirty=$(peer_stat 3 dirty_bytes) ||
	fail "xseg stats of cached"
echo "cached holds $dirty dirty bytes"

echo "--- stop: SIGTERM in the reverse order, each waited for"
for ((i = ${#order[@]} - 1; i >= 0; i--)); do
	k=${order[$i]}
	kill -TERM "${pid_of[$k]}"
	wait_from "${pid_of[$k]}" STOPPING=1 > /dev/null
	wait "${pid_of[$k]}"; rc=$?
	[ $rc -eq 0 ] || fail "$k exited $rc on SIGTERM (systemd: failed)"
done
unit_cmd "xseg-segment@$SEG.service" ExecStop || fail "xseg-segment@ has no ExecStop"
"${argv[@]}" || fail "xseg-segment@$SEG: '${argv[*]}' exited $?"
[ -e "/dev/shm/$SEG" ] && fail "the segment unit's ExecStop left the segment"

echo "--- every byte straight from a fresh filed"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M > /dev/null ||
	fail "xseg create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed2.log" & pids+=($!)
wait_bound 1
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol1:64M 2> "$DIR/vlmcd2.log" &
pids+=($!)
wait_bound 2
bench --op read --pattern rand
echo "ok: the units ran in order, stopped in reverse, cached's $dirty dirty bytes reached filed"
