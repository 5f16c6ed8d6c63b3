#!/usr/bin/env bash
# Instructions per request of one peer in the middle of a path, under
# callgrind (valgrind): deterministic where IOPS on a shared machine are
# not, so a change to a hot path can be weighed on 2 vCPUs (issue 24).
#   bench/run-instructions.sh CASE [N]
# CASE (bench-xseg -> PEER [-> filed], 4K random at depth 16, one worker,
# --spin-us 0; the counted run follows an uncounted warm-up):
#   nulld        nulld answering            (the IPC limit)
#   hop          nulld --forward to filed   (a bare hop, rows (c)-(e))
#   wb-write     cached write-back, hits    (row (a))
#   wb-read      cached write-back, hits    (row (b))
#   wt-write     cached write-through       (row (d))
#   cold-read    cached, every read a miss  (row (e))
#   hop-read     nulld --forward, reads     (row (e)'s other side)
# N: requests counted (16000; at most 16384, each 4K block of the 64M
# once). Prints the peer's instructions per request and its 25 costliest
# functions (self cost); the callgrind file is kept under $OUT (default
# /tmp/run-instructions) for callgrind_annotate.
# Knobs: BIN, PEER_ARGS (more options for the peer).
set -u
cd "$(dirname "$0")/.."
CASE=${1:-}; N=${2:-16000}
BIN=${BIN:-$PWD/${BUILD:-build}/bin}
OUT=${OUT:-/tmp/run-instructions}
command -v valgrind > /dev/null || { echo "valgrind is missing (apt install valgrind)" >&2; exit 1; }
SEG=instructions-$$
DATA=$(mktemp -d /dev/shm/instructions.XXXXXX)
pids=()
. bench/bench_lib.sh
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT"

CACHED=("$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 256M
	--max-objects 4096 --threads 1 --spin-us 0)
case $CASE in
nulld) PEER=("$BIN/nulld" --segment "$SEG" --port 3 --threads 1 --spin-us 0) OP=write ;;
hop) PEER=("$BIN/nulld" --segment "$SEG" --port 3 --forward 1 --threads 1 --spin-us 0) OP=write ;;
hop-read) PEER=("$BIN/nulld" --segment "$SEG" --port 3 --forward 1 --threads 1 --spin-us 0) OP=read ;;
wb-write) PEER=("${CACHED[@]}" --write-policy writeback) OP=write ;;
wb-read) PEER=("${CACHED[@]}" --write-policy writeback) OP=read ;;
wt-write) PEER=("${CACHED[@]}" --write-policy writethrough) OP=write ;;
cold-read) PEER=("${CACHED[@]}" --write-policy writeback) OP=read ;;
*) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
[ "$N" -ge 1000 ] && [ "$N" -le 16384 ] || { echo "N '$N': 1000..16384 requests" >&2; exit 2; }

bx() {   # bx PORT OP SIZE: bench-xseg over the first SIZE bytes of 16 objects
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$1" --op "$2" --pattern rand \
		--block-size 4K --iodepth 16 --object-size 4M --seed 5 --timeout 120 \
		--total-size "$3" > "$DATA/bx.out" 2>&1 ||
		{ tail -3 "$DATA/bx.out" >&2; echo "bench-xseg $2 to port $1 failed" >&2; exit 1; }
}

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 2048 --heap 512M > /dev/null || exit 1
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DATA/objects" --threads 2 & pids+=($!)
wait_bound 1
bx 1 write 64M   # filed holds every object: later writes overwrite, reads find data
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$CASE.%p" \
	"${PEER[@]}" ${PEER_ARGS:-} 2> "$DATA/valgrind.log" & pids+=($!)
peer=$!
for _ in $(seq 10); do wait_bound 3 2>/dev/null && break; done   # slow under valgrind
# warm-up: write-back hits need their blocks cached; a cold read must miss
case $CASE in
wb-read) bx 3 write 64M ;;
cold-read) ;;
*) bx 3 "$OP" $((N / 4 * 4))K ;;
esac
callgrind_control -i on $peer > /dev/null 2>&1
bx 3 "$OP" $((N * 4))K
callgrind_control -i off $peer > /dev/null 2>&1
kill -TERM $peer; wait $peer 2>/dev/null
f=$(ls -t "$OUT/$CASE".* | head -1)
total=$(callgrind_annotate --auto=no "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
echo "$CASE: $((total / N)) instructions per request ($total over $N requests; $f)"
callgrind_annotate --auto=no "$f" 2>/dev/null | sed -n '/file:function/,$p' | sed -n '3,27p' |
	sed 's|'"$PWD"'/||; s| \[[^]]*\]$||'
