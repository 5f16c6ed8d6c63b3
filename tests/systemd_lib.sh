# Sourced after lib.sh by the tests that run tools/systemd/'s units the way
# systemd runs them (no systemd needed): installs them into a scratch
# PREFIX, writes the EnvironmentFile from $UNIT_ENV (its text), starts the
# python3 notify socket. Then:
#   unit_cmd UNIT KEY   argv of UNIT's KEY= line (first one) into $argv, as
#                       systemd makes it: %i the segment, $VAR split into
#                       words, $$ a '$'; 1 if UNIT has no KEY=.
#   wait_from PID WORD  the datagram holding WORD that PID sent (10 s).
#   unit_pre K          ExecStartPre of xseg-K@ if it has one; 1 if it fails
#                       (systemd: the unit failed, ExecStart not run).
#   unit_start K        unit_pre, ExecStart of xseg-K@ with NOTIFY_SOCKET, waits for
#                       READY=1 with its port bound, runs its ExecStartPost;
#                       pid_of[K] is its pid (also in pids).
#   unit_try_start K    the same, but 1 (its exit status in $rc) if it
#                       exits before READY=1: a failed start.
#   unit_requires K     the xseg-PEER@ units K needs active, as systemd
#                       reads them: its Requires=, and the units in
#                       $ENABLED whose [Install] RequiredBy= names it (the
#                       K.requires/ links `systemctl --root enable` makes;
#                       without systemctl, read from the [Install] lines).
#   unit_stop K         SIGTERM to pid_of[K], waits for it: its exit status
#                       in $rc (systemd: not 0 is a failed unit).
command -v python3 > /dev/null || fail "python3 is needed (tools/install-deps installs it)"

P=$DIR/prefix
make -s --no-print-directory BUILD="${BUILD:-build}" SANITIZE="${SANITIZE:-}" PREFIX="$P" install \
	> "$DIR/install.log" 2>&1 || { cat "$DIR/install.log"; fail "make install PREFIX=$P failed"; }
units=$P/lib/systemd/system

env=$DIR/$SEG.env
printf '%s\n' "# as /etc/xseg/$SEG.env would be" "$UNIT_ENV" > "$env"
set -a; . "$env"; set +a   # EnvironmentFile=: the service's environment

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

wait_from() {
	for _ in $(seq 200); do
		grep -m1 "^pid=$1 .*$2" "$DIR/notify.log" && return 0
		sleep 0.05
	done
	fail "no $2 from pid $1; NOTIFY_SOCKET got: $(cat "$DIR/notify.log")"
}

declare -A pid_of
unit_pre() {
	unit_cmd "xseg-$1@$SEG.service" ExecStartPre || return 0
	"${argv[@]}" >> "$DIR/$1-pre.log" 2>&1
}

unit_start() {
	local k=$1 line
	unit_pre "$k" || fail "xseg-$k@ ExecStartPre: $(cat "$DIR/$k-pre.log")"
	unit_cmd "xseg-$k@$SEG.service" ExecStart || fail "xseg-$k@ has no ExecStart"
	NOTIFY_SOCKET=$sock "${argv[@]}" 2>> "$DIR/$k.log" &
	pid_of[$k]=$!
	pids+=($!)
	line=$(wait_from "${pid_of[$k]}" READY=1)
	case $line in *" bound=yes "*) ;; *) fail "$k: READY=1 without its port bound: $line" ;; esac
	if unit_cmd "xseg-$k@$SEG.service" ExecStartPost; then
		"${argv[@]}" > "$DIR/post.out" 2>&1 ||
			fail "xseg-$k@ ExecStartPost '${argv[*]}': $(cat "$DIR/post.out")"
	fi
}

unit_try_start() {
	local k=$1 line
	unit_pre "$k" || { rc=pre; return 1; }
	unit_cmd "xseg-$k@$SEG.service" ExecStart || fail "xseg-$k@ has no ExecStart"
	NOTIFY_SOCKET=$sock "${argv[@]}" 2>> "$DIR/$k.log" &
	pid_of[$k]=$!
	pids+=($!)
	for _ in $(seq 200); do
		grep -q "^pid=${pid_of[$k]} .*READY=1" "$DIR/notify.log" && break
		if ! kill -0 "${pid_of[$k]}" 2>/dev/null; then
			wait "${pid_of[$k]}"; rc=$?
			return 1
		fi
		sleep 0.05
	done
	line=$(wait_from "${pid_of[$k]}" READY=1)
	case $line in *" bound=yes "*) ;; *) fail "$k: READY=1 without its port bound: $line" ;; esac
	if unit_cmd "xseg-$k@$SEG.service" ExecStartPost; then
		"${argv[@]}" > "$DIR/post.out" 2>&1 ||
			fail "xseg-$k@ ExecStartPost '${argv[*]}': $(cat "$DIR/post.out")"
	fi
}

if [ -n "${ENABLED:-}" ] && command -v systemctl > /dev/null; then
	root=$DIR/root
	mkdir -p "$root/usr/lib/systemd/system" "$root/etc/systemd/system"
	cp "$units"/* "$root/usr/lib/systemd/system/"
	# shellcheck disable=SC2046
	systemctl --root="$root" enable $(for e in $ENABLED; do echo "xseg-$e@$SEG.service"; done) \
		> "$DIR/enable.out" 2>&1 || fail "systemctl --root enable: $(cat "$DIR/enable.out")"
fi
unit_requires() {
	local k=$1 e l
	sed -n 's/^Requires=//p' "$units/xseg-$k@.service" | tr ' ' '\n' |
		sed -n 's/^xseg-\([a-z]*\)@%i.service$/\1/p' | grep -v '^segment$'
	if [ -n "${root:-}" ]; then
		for l in "$root/etc/systemd/system/xseg-$k@$SEG.service.requires"/*; do
			[ -L "$l" ] || continue   # a link into the root: -e would not follow
			l=${l##*/xseg-}; echo "${l%%@*}"
		done
		return
	fi
	for e in ${ENABLED:-}; do
		sed -n '/^\[Install\]/,$p' "$units/xseg-$e@.service" | sed -n 's/^RequiredBy=//p' |
			tr ' ' '\n' | grep -qx "xseg-$k@%i.service" && echo "$e"
	done
}

unit_stop() {
	kill -TERM "${pid_of[$1]}"
	wait "${pid_of[$1]}"; rc=$?
}
