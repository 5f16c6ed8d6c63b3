# Shared by scripts that run a path filed (port 1) <- vlmcd (port 2, volume
# "vol") on one segment, sourced after lib.sh: the segment and the two
# peers, and for the cache-chain scripts a verified bench over the whole
# volume and write-back caches that keep everything dirty.

# path_start REQUESTS HEAP VOLUME_SIZE [vlmcd options]: filed's pid in $filed.
path_start() {
	local requests=$1 heap=$2 vol=$3; shift 3
	"$BIN/xseg" create --segment "$SEG" --ports 16 --requests "$requests" --heap "$heap" ||
		fail "create"
	"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" 2> "$DIR/filed.log" & filed=$!
	pids+=($filed)
	"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume "vol:$vol" "$@" \
		2> "$DIR/vlmcd.log" & pids+=($!)
	wait_bound 1; wait_bound 2
}

# chain_bench OP SEED OUT: the whole volume ($VOL) through port 2, verified.
chain_bench() {
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port 2 --volume vol --op "$1" \
		--pattern seq --total-size "$VOL" --block-size 64K --iodepth 8 --seed "$2" \
		--verify full --timeout 30 --json > "$3" 2> "$3.err"
}

# chain_cache PORT [cached options]: a write-back cache of filed that
# writes nothing back on its own (dirty-high/low 100), bound before return.
chain_cache() {
	local port=$1; shift
	"$BIN/cached" --segment "$SEG" --port "$port" --blocker-port 1 --cache-size 64M \
		--object-size 1M --write-policy writeback --dirty-high 100 --dirty-low 100 "$@" \
		2>> "$DIR/cached$port.log" & pids+=($!)
	wait_bound "$port"
}
