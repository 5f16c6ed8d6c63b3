#!/usr/bin/env bash
# nbdd asks vlmcd for its volumes (INFO with no target) instead of being
# told them again (issue 25): with no --volume it serves vlmcd's volumes at
# vlmcd's sizes (nbdinfo --list, verified I/O with qemu-io and nbdcopy);
# an unknown export name is refused in the handshake (NBD_REP_ERR_UNKNOWN;
# the old EXPORT_NAME closes), not with EIO later; a --volume whose size
# or name vlmcd does not have fails at start naming both sizes; a vlmcd
# that is not up yet is waited for up to --target-timeout; a target that
# is not vlmcd is named.
set -u
SEG_PREFIX=nbdd-vol
. "$(dirname "$0")/lib.sh"
T="timeout 60"
RAW="python3 $(cd "$(dirname "$0")" && pwd)/support/nbd_raw_client.py"

for tool in qemu-io nbdcopy nbdinfo python3; do
	command -v $tool > /dev/null || fail "$tool is missing: run tools/install-deps"
done

# start_nbdd PORT NAME OPTIONS...: nbdd on xseg port PORT serving
# $DIR/NAME.sock, logging to $DIR/NAME.log; its pid in $nbdd_pid
start_nbdd() {
	local port=$1 name=$2; shift 2
	"$BIN/nbdd" --segment "$SEG" --port "$port" --unix "$DIR/$name.sock" "$@" \
		2> "$DIR/$name.log" & nbdd_pid=$!
	pids+=($nbdd_pid)
	for _ in $(seq 200); do [ -S "$DIR/$name.sock" ] && return 0; sleep 0.05; done
	fail "nbdd $name: no socket $DIR/$name.sock"
}
stop_nbdd() {
	kill -TERM $nbdd_pid; wait $nbdd_pid || fail "nbdd $1 exited $? on SIGTERM"
}
# exports SOCK: "name size" lines, as nbdinfo --list sees them
exports() {
	$T nbdinfo --list --json "nbd+unix://?socket=$1" | python3 -c 'import json, sys
for e in json.load(sys.stdin)["exports"]: print(e["export-name"], e["export-size"])'
}

echo "--- the path: nbdd -> vlmcd -> filed"
"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
# sizes that are not a multiple of the object size (4M) nor of 4K
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M --volume small:1536K \
	--volume odd:5000000 2> "$DIR/vlmcd.log" & pids+=($!)
wait_bound 2

echo "--- vlmcd lists its volumes for INFO with no target"
"$BIN/xreq" --segment "$SEG" --port 12 --target-port 2 --op info > "$DIR/out" ||
	fail "xreq info with no target: $(cat "$DIR/out")"
grep -qF "data='vol 67108864.small 1572864.odd 5000000.'" "$DIR/out" ||
	fail "vlmcd's list: $(cat "$DIR/out")"

echo "--- no --volume: vlmcd's volumes at vlmcd's sizes"
start_nbdd 4 all --target-port 2 --log-level info
exports "$DIR/all.sock" > "$DIR/list" || fail "nbdinfo --list"
printf 'vol 67108864\nsmall 1572864\nodd 5000000\n' | cmp -s - "$DIR/list" ||
	fail "exports listed: $(cat "$DIR/list")"
grep -q "export odd: 5000000 bytes" "$DIR/all.log" || fail "nbdd did not log its exports"
URI="nbd+unix:///vol?socket=$DIR/all.sock"
qio() { $T qemu-io -f raw "$@" > "$DIR/qio.out" 2>&1 || { cat "$DIR/qio.out"; fail "qemu-io $*"; }
	! grep -qiE "fail|error" "$DIR/qio.out" || { cat "$DIR/qio.out"; fail "qemu-io reported a failure"; }; }
qio "$URI" -c "write -P 0x5a 4190000 200000" -c "write -P 0xa5 67108000 864" -c flush
qio "$URI" -c "read -P 0x5a 4190000 200000" -c "read -P 0xa5 67108000 864"
# the last bytes of the odd-sized volume (qemu-io 7.2 hangs reading past
# the end of a size that is not a multiple of 512: not tried here)
qio "nbd+unix:///odd?socket=$DIR/all.sock" -c "write -P 0x77 4999000 1000" -c "read -P 0x77 4999000 1000"
# the bytes reached vlmcd's objects on filed
[ -s "$DIR/data/vol_0000000000000000" ] && [ -s "$DIR/data/vol_0000000000000001" ] ||
	fail "no objects of vol on filed: $(ls "$DIR/data")"
head -c 1572864 /dev/urandom > "$DIR/small.raw"
$T nbdcopy "$DIR/small.raw" "nbd+unix:///small?socket=$DIR/all.sock" || fail "nbdcopy in"
$T nbdcopy "nbd+unix:///small?socket=$DIR/all.sock" "$DIR/small.back" || fail "nbdcopy out"
cmp "$DIR/small.raw" "$DIR/small.back" || fail "nbdcopy: bytes differ"
# the empty name is the first volume
$T nbdinfo --size "nbd+unix://?socket=$DIR/all.sock" > "$DIR/out" 2>&1 &&
	[ "$(cat "$DIR/out")" = 67108864 ] || fail "the default export: $(cat "$DIR/out")"

echo "--- an unknown export is refused in the handshake"
$T nbdinfo "nbd+unix:///nosuch?socket=$DIR/all.sock" > "$DIR/out" 2>&1 &&
	fail "nbdinfo of an unknown export succeeded"
grep -q "server replied with error to opt_go" "$DIR/out" || fail "nbdinfo nosuch: $(cat "$DIR/out")"
$T qemu-io -f raw "nbd+unix:///nosuch?socket=$DIR/all.sock" -c "read 0 512" > "$DIR/out" 2>&1 &&
	fail "qemu-io opened an unknown export"
grep -q "export not available" "$DIR/out" || fail "qemu-io nosuch: $(cat "$DIR/out")"
grep -q "unknown export 'nosuch'" "$DIR/all.log" || fail "nbdd did not log the unknown export"
$T $RAW "$DIR/all.sock" unknown-export || fail "raw client: unknown-export"
stop_nbdd all

echo "--- --volume: only those, each checked against vlmcd"
start_nbdd 4 some --target-port 2 --volume small:1536K
exports "$DIR/some.sock" > "$DIR/list" || fail "nbdinfo --list"
[ "$(cat "$DIR/list")" = "small 1572864" ] || fail "--volume small: listed $(cat "$DIR/list")"
$T nbdinfo "nbd+unix:///vol?socket=$DIR/some.sock" > "$DIR/out" 2>&1 &&
	fail "a volume not given was served"
stop_nbdd some
printf '# the same list\nvol 64M\nodd 5000000\n' > "$DIR/vols"
start_nbdd 4 file --target-port 2 --volumes-file "$DIR/vols"
exports "$DIR/file.sock" > "$DIR/list" || fail "nbdinfo --list"
printf 'vol 67108864\nodd 5000000\n' | cmp -s - "$DIR/list" || fail "--volumes-file: $(cat "$DIR/list")"
stop_nbdd file

echo "--- a size or a name vlmcd does not have: exit 2 at start, both sizes named"
bad_arg "'vol' is 33554432 bytes here but 67108864 bytes on --target-port 2" \
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/x.sock" \
	--volume small:1536K --volume vol:32M
bad_arg "'nosuch' is not a volume of --target-port 2 (it has vol, small, odd)" \
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/x.sock" --volume nosuch:1M
printf 'odd 5000001\n' > "$DIR/bad"
bad_arg "--volumes-file: 'odd' is 5000001 bytes here but 5000000" \
	"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/x.sock" \
	--volumes-file "$DIR/bad"
[ -e "$DIR/x.sock" ] && fail "a refused nbdd left its socket"
# --daemon: the caller gets the same status and line
expect_exit 2 timeout 20 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 \
	--unix "$DIR/x.sock" --volume vol:1G --daemon
grep -qF "'vol' is 1073741824 bytes here but 67108864" "$DIR/err" ||
	fail "--daemon with a wrong size: $(cat "$DIR/err")"

echo "--- a target that does not list volumes, or nobody at all"
expect_exit 1 timeout 20 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 1 --unix "$DIR/x.sock"
grep -q "target-port 1 does not list its volumes.*Invalid argument" "$DIR/err" ||
	fail "filed as the target: $(cat "$DIR/err")"
start=$SECONDS
expect_exit 1 timeout 20 "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 9 --unix "$DIR/x.sock" \
	--target-timeout 1
grep -q "waiting up to 1 s for --target-port 9" "$DIR/err" &&
	grep -q "target-port 9: no volume list within 1 s (--target-timeout): nobody serves it yet" \
	"$DIR/err" || fail "nobody at the target: $(cat "$DIR/err")"
[ $((SECONDS - start)) -le 5 ] || fail "--target-timeout 1 took $((SECONDS - start)) s"
bad_arg "'0'" "$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/x.sock" \
	--target-timeout 0

echo "--- vlmcd started after nbdd: nbdd waits, then serves"
"$BIN/nbdd" --segment "$SEG" --port 5 --target-port 9 --unix "$DIR/late.sock" \
	2> "$DIR/late.log" & nbdd_pid=$!
pids+=($nbdd_pid)
for _ in $(seq 100); do grep -q "waiting up to 30 s" "$DIR/late.log" && break; sleep 0.05; done
grep -q "waiting up to 30 s for --target-port 9 (vlmcd)" "$DIR/late.log" || fail "no line saying nbdd waits"
[ -e "$DIR/late.sock" ] && fail "nbdd serves before it knows the volumes"
"$BIN/vlmcd" --segment "$SEG" --port 9 --blocker-port 1 --volume late:8M \
	2> "$DIR/vlmcd-late.log" & pids+=($!)
for _ in $(seq 200); do [ -S "$DIR/late.sock" ] && break; sleep 0.05; done
exports "$DIR/late.sock" > "$DIR/list" || fail "nbdinfo --list"
[ "$(cat "$DIR/list")" = "late 8388608" ] || fail "late vlmcd: listed $(cat "$DIR/list")"
qio "nbd+unix:///late?socket=$DIR/late.sock" -c "write -P 0x42 0 65536" -c "read -P 0x42 0 65536"
stop_nbdd late

echo "--- SIGTERM while waiting for the target: exits, nothing left"
"$BIN/nbdd" --segment "$SEG" --port 5 --target-port 10 --unix "$DIR/wait.sock" \
	2> "$DIR/wait.log" & nbdd_pid=$!
pids+=($nbdd_pid)
for _ in $(seq 100); do grep -q "waiting up to" "$DIR/wait.log" && break; sleep 0.05; done
start=$SECONDS
kill -TERM $nbdd_pid
wait $nbdd_pid
[ $((SECONDS - start)) -le 3 ] || fail "nbdd took $((SECONDS - start)) s to stop while waiting"
grep -q "stopped while waiting for --target-port 10" "$DIR/wait.log" || fail "no line: $(cat "$DIR/wait.log")"
[ -e "$DIR/wait.sock" ] && fail "socket left behind"
echo ok
