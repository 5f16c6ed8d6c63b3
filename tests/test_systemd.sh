#!/usr/bin/env bash
# The systemd units and the peers' side of Type=notify:
#  - every unit of tools/systemd/, as `make install` writes it (into a
#    scratch PREFIX, so ExecStart names real programs), passes
#    `systemd-analyze verify` without a word about it (skipped, saying
#    so, where systemd-analyze is absent);
#  - the per-peer units are ordered so each stops before the peers it
#    sends to (blockers last);
#  - a peer started with NOTIFY_SOCKET sends READY=1 from its own pid,
#    and at that moment `xseg info` shows its port bound by that pid;
#    SIGTERM brings STOPPING=1, then it exits 0. With --daemon, READY=1
#    names the daemon as MAINPID (the pid in its pidfile).
# tests/support/notify_listener.py (python3) plays systemd's notify socket.
# Run by tests/run-tests.sh (BUILD, SANITIZE as for the build).
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=systemd
. tests/lib.sh
BUILD=${BUILD:-build}

# ---- systemd-analyze verify ------------------------------------------------
if ! command -v systemd-analyze > /dev/null; then
	echo "SKIP (part): systemd-analyze is not installed; the units are not verified"
else
	P=$DIR/prefix
	make -s --no-print-directory BUILD="$BUILD" SANITIZE="${SANITIZE:-}" PREFIX="$P" install \
		> "$DIR/install.log" 2>&1 || { cat "$DIR/install.log"; fail "make install PREFIX=$P failed"; }
	units=$P/lib/systemd/system
	n=0
	for src in tools/systemd/*.service tools/systemd/*.target; do
		f=$(basename "$src")
		[ -f "$units/$f" ] || fail "make install did not install $f"
		# A template is verified as an instance (its dependencies are
		# instances too, found in the same folder).
		unit=${f/@./@verify.}
		systemd-analyze verify "$units/$unit" > "$DIR/verify.out" 2>&1
		rc=$?
		# Lines about units outside ours (the host's) are not ours to judge.
		if [ $rc -ne 0 ] || grep -q "$units\|xseg" "$DIR/verify.out"; then
			cat "$DIR/verify.out"
			fail "systemd-analyze verify $unit: exit $rc"
		fi
		n=$((n + 1))
	done
	grep -l '@BINDIR@\|@PREFIX@' "$units"/* && fail "a placeholder is left in an installed unit"
	echo "ok: systemd-analyze verify passes on $n units"

	# A cache in front of synapsed: docs/systemd.md's unit of its own for the
	# instance starts synapsed first and makes no ordering cycle; the
	# drop-in way (Before= added to the template's After=) does, and
	# systemd then deletes a start job.
	front=$DIR/front
	mkdir -p "$front" "$front/xseg-synapsed@verify.service.d"
	cp "$units"/* "$front"/
	printf '[Unit]\nWants=xseg-cached@verify.service xseg-synapsed@verify.service\n' \
		> "$front/both.target"
	recipe=$(sed -n "/^sed -e '\/^After=\/s\/ xseg-cached/,/xseg-synapsed@S.service$/p" \
		docs/systemd.md)
	[ -n "$recipe" ] || fail "docs/systemd.md has no sed recipe for synapsed first"
	recipe=${recipe//\/usr\/lib\/systemd\/system/$units}
	recipe=${recipe//\/etc\/systemd\/system\/xseg-synapsed@S.service/$front/xseg-synapsed@verify.service}
	eval "$recipe" || fail "docs/systemd.md's recipe failed: $recipe"
	SYSTEMD_UNIT_PATH=$front: systemd-analyze verify "$front/both.target" > "$DIR/front.out" 2>&1
	grep -q "ordering cycle" "$DIR/front.out" &&
		fail "docs/systemd.md's synapsed-first unit makes an ordering cycle: $(cat "$DIR/front.out")"
	# systemd took it (not the template): the opposite order added to
	# cached now is a cycle
	mkdir -p "$front/xseg-cached@verify.service.d"
	printf '[Unit]\nBefore=xseg-synapsed@verify.service\n' \
		> "$front/xseg-cached@verify.service.d/order.conf"
	SYSTEMD_UNIT_PATH=$front: systemd-analyze verify "$front/both.target" > "$DIR/front.out" 2>&1
	grep -q "ordering cycle" "$DIR/front.out" ||
		fail "systemd did not take docs/systemd.md's synapsed-first unit for the instance"
	rm -r "$front/xseg-synapsed@verify.service" "$front/xseg-cached@verify.service.d"
	printf '[Unit]\nBefore=xseg-cached@verify.service\n' \
		> "$front/xseg-synapsed@verify.service.d/order.conf"
	SYSTEMD_UNIT_PATH=$front: systemd-analyze verify "$front/both.target" > "$DIR/front.out" 2>&1
	grep -q "ordering cycle" "$DIR/front.out" ||
		fail "a Before= drop-in made no cycle: this check cannot see one"
	echo "ok: synapsed first by docs/systemd.md's unit, no ordering cycle (a drop-in makes one)"
fi

# ---- order: a peer stops before those it sends to ---------------------------
# systemd stops in the reverse of After=: FRONT After= BEHIND means FRONT
# stops first (a cache before its blocker, vlmcd before the cache, ...).
after() {   # after FRONT BEHIND...
	local front=$1 b; shift
	for b in "$@"; do
		grep -q "^After=.* xseg-$b@%i.service" "tools/systemd/xseg-$front@.service" ||
			fail "xseg-$front@.service is not After= xseg-$b@%i.service: it could outlive it on stop"
	done
}
after cached filed sosd nulld
after synapsed filed sosd nulld cached
after vlmcd filed sosd nulld cached synapsed
after nbdd filed sosd nulld cached synapsed vlmcd
for b in filed sosd nulld; do
	grep -Eq "^After=.*xseg-(filed|sosd|nulld|cached|synapsed|vlmcd|nbdd)@" "tools/systemd/xseg-$b@.service" &&
		fail "the blocker unit xseg-$b@.service is After= another peer"
	grep -q "^After=xseg-segment@%i.service" "tools/systemd/xseg-$b@.service" ||
		fail "xseg-$b@.service is not After= its segment"
done
echo "ok: units ordered blockers, cached, synapsed, vlmcd, nbdd"

# ---- READY=1 and STOPPING=1 --------------------------------------------------
command -v python3 > /dev/null || fail "python3 is needed (tools/install-deps installs it)"
sock=$DIR/notify.sock
python3 tests/support/notify_listener.py "$sock" "$BIN/xseg" "$SEG" >> "$DIR/notify.log" 2> "$DIR/listen.log" &   # appends: truncated below
pids+=($!)
for _ in $(seq 100); do [ -e "$sock.ready" ] && break; sleep 0.05; done
[ -e "$sock.ready" ] || fail "the python3 listener did not start: $(cat "$DIR/listen.log")"

# wait_msg WORD: waits (10 s) for a datagram holding WORD; prints its line.
wait_msg() {
	for _ in $(seq 200); do
		grep -m1 -- "$1" "$DIR/notify.log" && return 0
		sleep 0.05
	done
	fail "no $1 came to NOTIFY_SOCKET; it got: $(cat "$DIR/notify.log")"
}

"$BIN/xseg" create --segment "$SEG" --ports 4 --requests 64 > /dev/null || fail "xseg create failed"

# A peer in the foreground, as a Type=notify unit runs it.
NOTIFY_SOCKET=$sock "$BIN/nulld" --segment "$SEG" --port 1 2> "$DIR/nulld.log" &
peer=$!
pids+=($peer)
line=$(wait_msg READY=1)
case $line in
"pid=$peer bound=yes "*) ;;
*) fail "READY=1 should come from pid $peer with port 1 bound by it: $line" ;;
esac
grep -q "MAINPID=$peer" <<< "$line" || fail "READY=1 should name MAINPID=$peer: $line"
grep -q STOPPING=1 "$DIR/notify.log" && fail "STOPPING=1 before any stop: $(cat "$DIR/notify.log")"
kill -TERM "$peer"
line=$(wait_msg STOPPING=1)
case $line in "pid=$peer "*) ;; *) fail "STOPPING=1 should come from pid $peer: $line" ;; esac
wait "$peer"; rc=$?
[ $rc -eq 0 ] || fail "nulld exited $rc after SIGTERM, expected 0"
[ "$(grep -c READY=1 "$DIR/notify.log")" -eq 1 ] || fail "READY=1 more than once: $(cat "$DIR/notify.log")"
[ "$(grep -c STOPPING=1 "$DIR/notify.log")" -eq 1 ] || fail "STOPPING=1 more than once: $(cat "$DIR/notify.log")"
echo "ok: READY=1 with the port bound, STOPPING=1 on SIGTERM"

# With --daemon: the daemon says READY=1 and names itself as MAINPID.
: > "$DIR/notify.log"
NOTIFY_SOCKET=$sock "$BIN/nulld" --segment "$SEG" --port 2 --daemon \
	--pidfile "$DIR/nulld2.pid" 2>> "$DIR/nulld2.log" || fail "nulld --daemon exited $?"
daemon=$(cat "$DIR/nulld2.pid")
pids+=($daemon)
line=$(wait_msg READY=1)
case $line in
"pid=$daemon bound=yes "*"MAINPID=$daemon"*) ;;
*) fail "--daemon: READY=1 should come from the daemon $daemon, port bound, MAINPID=$daemon: $line" ;;
esac
kill -TERM "$daemon"
wait_msg STOPPING=1 > /dev/null
echo "ok: --daemon: READY=1 from the daemon with MAINPID"
