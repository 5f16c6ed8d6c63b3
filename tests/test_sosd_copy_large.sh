#!/usr/bin/env bash
# run-tests: alone (it starts a real Ceph: two at once on 2 vCPUs would crowd both)
# sosd COPY of a source larger than RADOS's osd_max_write_size (90M by
# default): one write_full of it failed with EMSGSIZE although
# --max-copy-size allows 128M. The copy is written in pieces now; the target
# must read back byte for byte, also when it was larger before (write_full
# of the first piece cuts it). Then COPYs at once under --max-copy-memory:
# the sources held in memory stay within it (each read whole; 24 COPYs of
# 100M once took 3.5G).
set -u
SEG_PREFIX=sosd-copy-large
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"

ceph_start
R=(rados --conf "$CONF" --pool xseg)
head -c $((96 << 20)) /dev/urandom > "$DIR/src" || fail "source file"
"${R[@]}" put big-src "$DIR/src" || fail "rados put big-src"
head -c $((120 << 20)) /dev/zero | tr '\0' 'z' > "$DIR/old"
"${R[@]}" put big-dst "$DIR/old" || fail "rados put big-dst"

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 64 --heap 16M || fail "xseg create"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 2 \
	2> "$DIR/sosd.log" & spid=$!
pids+=($spid)
wait_bound 1
out=$("$BIN/xreq" --segment "$SEG" --port 5 --target-port 1 --op copy --src big-src \
	--target big-dst --timeout 120) || { cat "$DIR/sosd.log"; fail "COPY of 96M: $out"; }
echo "$out"
case "$out" in *"serviced=$((96 << 20))"*) ;; *) fail "COPY served the wrong size: $out" ;; esac
"${R[@]}" get big-dst "$DIR/dst" || fail "rados get big-dst"
cmp "$DIR/src" "$DIR/dst" || fail "big-dst is not a copy of big-src ($(stat -c %s "$DIR/dst") bytes)"
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"

echo "--- --max-copy-memory: 4 COPYs of 96M at once hold one source at a time"
expect_exit 2 "$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" \
	--max-copy-memory 64M
grep -q "max-copy-memory 67108864 is less than --max-copy-size" "$DIR/err" ||
	fail "--max-copy-memory under --max-copy-size: $(cat "$DIR/err")"
"$BIN/sosd" --segment "$SEG" --port 1 --pool xseg --conf "$CONF" --threads 2 \
	--max-copy-size 100M --max-copy-memory 100M --log-level info 2> "$DIR/sosd2.log" & spid=$!
pids+=($spid)
wait_bound 1
hwm() { awk '/^VmHWM:/ { print int($2 / 1024) }' "/proc/$spid/status"; }
"$BIN/xreq" --segment "$SEG" --port 5 --target-port 1 --op copy --src big-src \
	--target big-dst --timeout 120 > /dev/null || fail "COPY of 96M (second sosd)"
hwm1=$(hwm)
cps=()
for i in 1 2 3 4; do
	"$BIN/xreq" --segment "$SEG" --port $((5 + i)) --target-port 1 --op copy --src big-src \
		--target "dst-$i" --timeout 240 > "$DIR/copy-$i.out" 2>&1 & cps+=($!)
done
for i in 1 2 3 4; do
	wait "${cps[$((i - 1))]}" || fail "COPY $i of 4: $(cat "$DIR/copy-$i.out")"
done
waits=$(peer_stat 1 copy_waits)
hwm2=$(hwm)
echo "sosd VmHWM: ${hwm1} MiB after one COPY of 96M, ${hwm2} MiB after 4 at once; $waits waited"
[ "$waits" -ge 1 ] || fail "no COPY waited for --max-copy-memory (copy_waits $waits)"
grep -q "waits for --max-copy-memory" "$DIR/sosd2.log" || fail "no wait logged"
if [ -n "${SANITIZE:-}" ]; then
	echo "SANITIZE=$SANITIZE: the VmHWM bound is not checked"
else
	[ $((hwm2 - hwm1)) -lt 64 ] ||
		fail "4 COPYs at once grew sosd's peak by $((hwm2 - hwm1)) MiB (one source is 96)"
fi
for i in 1 2 3 4; do
	"${R[@]}" get "dst-$i" "$DIR/dst" || fail "rados get dst-$i"
	cmp -s "$DIR/src" "$DIR/dst" || fail "dst-$i is not a copy of big-src"
done
kill -TERM $spid
wait $spid; rc=$?
[ $rc -eq 0 ] || fail "sosd exited $rc on SIGTERM"
echo "sosd copy large: all checks passed"
