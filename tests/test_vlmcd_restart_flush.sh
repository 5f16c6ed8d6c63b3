#!/usr/bin/env bash
# A FLUSH covers every write acknowledged before it, across a restart of
# vlmcd: nbdd -> vlmcd -> cached (write-back: an acknowledged write is
# dirty in cached's memory) -> filed. A raw NBD client writes (no FLUSH),
# vlmcd is restarted (SIGKILL, then SIGTERM: either way it starts with no
# memory of what was written), the client's FLUSH is answered OK through
# the new vlmcd: the bytes must then be in filed's files. vlmcd's
# "written since the last FLUSH" set is in memory only: a new vlmcd that
# trusted its empty set answered the FLUSH with nothing flushed.
set -u
SEG_PREFIX=vlmcd-restart-flush
. "$(dirname "$0")/lib.sh"

T="timeout 60"
SUPPORT=$(cd "$(dirname "$0")" && pwd)/support
SOCK=$DIR/nbd.sock

"$BIN/xseg" create --segment "$SEG" --ports 8 --requests 256 --heap 64M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & pids+=($!)
wait_bound 1
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 32M \
	--write-policy writeback --dirty-high 100 2> "$DIR/cached.log" & pids+=($!)
wait_bound 3
start_vlmcd() {   # start_vlmcd LOG
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 3 --volume vol:64M \
		2> "$DIR/$1" & vpid=$!
	pids+=($vpid)
	wait_bound 2
}
start_vlmcd vlmcd0.log
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$SOCK" --log-level info \
	2> "$DIR/nbdd.log" & pids+=($!)
wait_bound 4
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done

# client write OFFSET SEED | client flush OFFSET SEED: the raw client's
# helpers; the data is 12345 bytes of SEED's, across an object boundary.
client() {
	PYTHONPATH=$SUPPORT $T python3 -c '
import argparse, random, sys
import nbd_raw_client as c
sock, data_dir, what, offset, seed = sys.argv[1:6]
c.args = argparse.Namespace(case=what, addr=sock, data=data_dir)
offset = int(offset)
data = random.Random(int(seed)).randbytes(12345)
s = c.connect()
c.handshake(s, b"vol")
if what == "write":
    c.write(s, 1, offset, data)
    if c.on_disk(offset, data):
        c.fail("a WRITE is on disk at once: cached is not write-back, this proves nothing")
else:
    c.request(s, c.FLUSH, 2, 0, 0)
    error, _ = c.reply(s)
    if error:
        c.fail("FLUSH failed: %d" % error)
    if not c.on_disk(offset, data):
        c.fail("FLUSH answered OK with an acknowledged write not on disk")
c.request(s, c.DISC, 3, 0, 0)
' "$SOCK" "$DIR/data" "$@"
}

k=0
for sig in KILL TERM; do
	k=$((k + 1))
	off=$(((4 << 20) * (2 * k) - 5000))   # across objects 2k-1 and 2k
	client write $off $k || fail "round $k: write"
	kill -$sig "$vpid"; wait "$vpid" 2>/dev/null
	wait_unbound 2
	start_vlmcd vlmcd$k.log
	client flush $off $k || fail "round $k (SIG$sig): FLUSH through a restarted vlmcd"
done
echo PASS
