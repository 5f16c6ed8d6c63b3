# Shared by scripts that run paths with `xseg up` (sourced after lib.sh):
# the run directory, and on exit `xseg down` of every $DIR/*.path, what
# their pidfiles still name killed, then lib.sh's cleanup.
RUN=$DIR/run
down_all() {
	for f in "$DIR"/*.path; do
		[ -f "$f" ] && "$BIN/xseg" down "$f" --run-dir "$RUN" --timeout 10 > /dev/null 2>&1
	done
	for f in "$RUN"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
	cleanup
}
trap down_all EXIT
# alive PID: it runs (a zombie waiting for init to reap it does not)
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]; }
