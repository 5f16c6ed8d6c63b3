#!/usr/bin/env bash
# Statistics from every peer (issue 25): filed, vlmcd, cached (plugged in
# front of filed) and nulld on one segment, bench-xseg load through vlmcd
# and against nulld, nbdd with NBD writes and reads (its commands counted). Every peer's figures move under load (requests, bytes,
# latency), `xseg stats` on the plugged port names who answered, every
# port is asked without --port, --watch prints rates, the Prometheus text
# parses (valid names and labels, HELP/TYPE, one series per port), the
# exporter answers HTTP GET /metrics, survives bad requests and exits 0 on
# SIGTERM; bad arguments exit 2 naming the value.
set -u
cd "$(dirname "$0")/.."
SEG_PREFIX=xseg-stats
. tests/lib.sh

"$BIN/xseg" create --segment "$SEG" --ports 16 --requests 1024 --heap 128M || fail "create"
"$BIN/filed" --segment "$SEG" --port 1 --dir "$DIR/data" --threads 2 2> "$DIR/filed.log" &
pids+=($!)
"$BIN/vlmcd" --segment "$SEG" --port 2 --blocker-port 1 --volume vol:64M --object-size 1M \
	2> "$DIR/vlmcd.log" & pids+=($!)
"$BIN/cached" --segment "$SEG" --port 3 --blocker-port 1 --cache-size 16M --object-size 1M \
	--write-policy writethrough --threads 2 2> "$DIR/cached.log" & pids+=($!)
"$BIN/nulld" --segment "$SEG" --port 5 2> "$DIR/nulld.log" & pids+=($!)
for p in 1 2 3 5; do wait_bound $p; done
"$BIN/xseg" plug --segment "$SEG" --port 1 --via 3 || fail "plug"

# stat PORT EXPR: EXPR over `xseg stats --port PORT --json` (as d) is true.
stat() {
	"$BIN/xseg" stats --segment "$SEG" --port "$1" --json > "$DIR/s$1.json" ||
		fail "xseg stats --port $1 exited $?"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
		"$DIR/s$1.json" "$2" || fail "port $1: not ($2): $(cut -c1-600 "$DIR/s$1.json")"
}
bench() {   # port op extra...
	local port=$1 op=$2; shift 2
	"$BIN/bench-xseg" --segment "$SEG" --port 10 --target-port "$port" --op "$op" \
		--pattern rand --block-size 4K --iodepth 8 --timeout 60 --json "$@" \
		> "$DIR/bench.out" 2> "$DIR/bench.err" || { cat "$DIR/bench.err"; fail "bench-xseg $op to $port"; }
}

echo "--- every peer answers, naming itself"
for p in 1 2 3 5; do stat $p "d['requests'] >= 0 and d['in_flight'] == 0"; done
stat 2 "d['peer'] == 'vlmcd' and d['port'] == 2 and d['requests_read'] == d['requests_write'] == 0 and d['requests_other'] >= 1"
stat 5 "d['peer'] == 'nulld' and d['port'] == 5"
# cached keeps its own figures, names unchanged, after the runtime's
stat 3 "d['peer'] == 'cached' and d['port'] == 3 and d['blocker_port'] == 1 and 'hits' in d and 'dirty_bytes' in d and 'lat_us_p99' in d"

echo "--- the plugged port: cached passes the question on, the answer names filed"
stat 1 "d['peer'] == 'filed' and d['port'] == 1 and d['addressed_port'] == 1"
"$BIN/xseg" stats --segment "$SEG" --port 1 > "$DIR/text" || fail "stats text"
head -1 "$DIR/text" | grep -q "^answered_by: filed, port 1, pid [0-9]* (port 1 is plugged via port 3)$" ||
	fail "stats --port 1 does not say whose figures: $(head -1 "$DIR/text")"
grep -q "^requests: " "$DIR/text" || fail "stats text lacks 'requests: N'"

echo "--- figures move under load"
bench 2 write --volume vol --total-size 8M --verify full --seed 1
bench 2 read --volume vol --total-size 8M --verify full --seed 1
bench 5 read --total-size 16M --object-size 1M
stat 2 "d['requests_write'] >= 2048 and d['requests_read'] >= 2048 and d['bytes_written'] >= 8<<20 and d['bytes_read'] >= 8<<20 and d['errors'] == 0 and 0 < d['lat_us_p50'] <= d['lat_us_p99'] <= d['lat_us_p999'] <= d['lat_us_max'] and d['sent'] >= 4096 and len(d['lat_buckets']) > 0"
stat 3 "d['requests_write'] >= 2048 and d['bytes_written'] >= 8<<20 and d['lat_us_p99'] > 0 and d['write_bytes'] >= 8<<20 and d['sent'] > 0"
stat 1 "d['requests_write'] >= 1 and d['bytes_written'] >= 8<<20 and d['lat_us_p99'] > 0"
# nulld answers in tens of ns: its p50 can print as 0.0 us; the sum cannot.
stat 5 "d['requests_read'] >= 4096 and d['bytes_read'] >= 16<<20 and d['lat_sum_us'] > 0 and len(d['lat_buckets']) > 0"

echo "--- nbdd counts its NBD commands"
"$BIN/nbdd" --segment "$SEG" --port 4 --target-port 2 --unix "$DIR/nbd.sock" --volume vol:64M \
	2> "$DIR/nbdd.log" & pids+=($!)
wait_bound 4
for _ in $(seq 100); do [ -S "$DIR/nbd.sock" ] && break; sleep 0.05; done
python3 - "$DIR/nbd.sock" <<'EOF' || fail "NBD writes and reads through nbdd"
import socket, struct, sys
def recv(s, n):
    b = b""
    while len(b) < n:
        r = s.recv(n - len(b))
        assert r, "nbdd closed the connection"
        b += r
    return b
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
assert recv(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))   # fixed newstyle, no zeroes
data = struct.pack(">I", 3) + b"vol" + struct.pack(">H", 0)
s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)   # NBD_OPT_GO
while True:
    _, _, rtype, length = struct.unpack(">QIII", recv(s, 20))
    recv(s, length)
    assert not rtype & 0x80000000, "GO refused"
    if rtype == 1:
        break
def req(cmd, cookie, offset, length, payload=b""):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, cmd, cookie, offset, length) + payload)
    magic, err, got = struct.unpack(">IIQ", recv(s, 16))
    assert (magic, err, got) == (0x67446698, 0, cookie), (magic, err, got)
for i in range(20):
    req(1, i, i * 65536, 65536, bytes([i]) * 65536)
for i in range(20):
    req(0, 100 + i, i * 65536, 65536)
    assert recv(s, 65536) == bytes([i]) * 65536
# a READ past the export's end: refused before the path, counted as such
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 999, 64 << 20, 4096))
assert struct.unpack(">IIQ", recv(s, 16)) == (0x67446698, 22, 999)
EOF
stat 4 "d['peer'] == 'nbdd' and d['requests_write'] == 20 and d['requests_read'] == 20 and d['bytes_written'] == 20 * 65536 and d['bytes_read'] == 20 * 65536 and d['lat_us_p50'] > 0 and d['sent'] >= 40 and d['refused'] == 1 and 'connections' in d and d['buffer_closes'] == 0"

echo "--- every port at once"
"$BIN/xseg" stats --segment "$SEG" --json > "$DIR/all.json" || fail "stats (every port) --json"
python3 - "$DIR/all.json" <<'EOF' || fail "stats (every port): $(cut -c1-400 "$DIR/all.json")"
import json, sys
l = json.load(open(sys.argv[1]))
peers = {d["asked_port"]: d["peer"] for d in l}
assert peers == {1: "filed", 2: "vlmcd", 3: "cached", 4: "nbdd", 5: "nulld"}, peers
EOF
"$BIN/xseg" stats --segment "$SEG" > "$DIR/table" || fail "stats (every port)"
for w in "1\(via 3\) *filed" "2 *vlmcd" "3 *cached" "4 *nbdd" "5 *nulld"; do
	grep -Eq "^$w " "$DIR/table" || fail "the table lacks '$w': $(cat "$DIR/table")"
done

echo "--- --watch: rates while a load runs"
# A load for a time, not a size: on a fast host 2G to nulld was over
# within the first of the two rounds.
"$BIN/bench-xseg" --segment "$SEG" --port 11 --target-port 5 --op read --pattern seq \
	--block-size 4K --iodepth 4 --total-size 64M --runtime 30 --object-size 64M --timeout 60 \
	> /dev/null 2>&1 & load=$!
"$BIN/xseg" stats --segment "$SEG" --watch 1 --count 2 > "$DIR/watch" || fail "--watch exited $?"
kill "$load" 2>/dev/null; wait "$load" 2>/dev/null
[ "$(grep -c ' port ' "$DIR/watch")" = 2 ] || fail "--count 2 did not print 2 rounds: $(cat "$DIR/watch")"
# rows: port peer iops rd_MiB/s wr_MiB/s p99_us errors/s inflight (nulld's
# p99 may read 0.0: it answers within a tenth of a microsecond)
awk '$1 == 5 && $2 == "nulld" && $3 > 100 && $4 > 0 && $6 >= 0 { ok = 1 } END { exit !ok }' "$DIR/watch" ||
	fail "--watch shows no load on nulld: $(cat "$DIR/watch")"

# check_prometheus FILE: the exposition text parses; one series per
# port and label set; every peer's port there.
check_prometheus() {
	python3 - "$1" <<'EOF'
import re, sys
name_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')
sample_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
types, helps, seen, ports = {}, set(), set(), {}
for n, line in enumerate(open(sys.argv[1]).read().splitlines(), 1):
    if line.startswith("# HELP "):
        name = line.split()[2]
        assert name_re.match(name) and name not in helps, (n, line)
        helps.add(name)
        continue
    if line.startswith("# TYPE "):
        _, _, name, typ = line.split()
        assert name in helps and name not in types, (n, line)
        assert typ in ("counter", "gauge", "summary", "histogram", "untyped"), (n, line)
        assert typ != "counter" or name.endswith("_total"), (n, line)
        assert name.startswith("xseg_"), (n, line)
        types[name] = typ
        continue
    assert line and not line.startswith("#"), (n, line)
    m = sample_re.match(line)
    assert m, (n, line)
    name, labels = m.group(1), m.group(3) or ""
    float(m.group(4))
    family = re.sub(r'_(sum|count)$', '', name) if name not in types else name
    assert family in types, ("no TYPE before", n, line)
    pairs = label_re.findall(labels)
    assert ",".join('%s="%s"' % p for p in pairs) == labels, ("labels", n, line)
    d = dict(pairs)
    assert "port" in d and len(d) == len(pairs), (n, line)
    key = (name, tuple(sorted(d.items())))
    assert key not in seen, ("duplicate series", n, line)
    seen.add(key)
    ports.setdefault(name, set()).add(d["port"])
for name in ("xseg_up", "xseg_requests_total", "xseg_bytes_total", "xseg_in_flight",
             "xseg_request_latency_seconds", "xseg_request_latency_seconds_count"):
    assert ports.get(name) == {"1", "2", "3", "4", "5"}, (name, ports.get(name))
assert types["xseg_request_latency_seconds"] == "summary"
assert "xseg_cached_hits_total" in types and ports["xseg_cached_hits_total"] == {"3"}
EOF
}

echo "--- --prometheus"
"$BIN/xseg" stats --segment "$SEG" --prometheus > "$DIR/prom" || fail "--prometheus exited $?"
check_prometheus "$DIR/prom" || fail "the Prometheus text does not parse: $(head -40 "$DIR/prom")"
grep -Eq '^xseg_requests_total\{port="2",peer="vlmcd",op="write"\} [1-9]' "$DIR/prom" ||
	fail "no vlmcd write count in the Prometheus text"

echo "--- the exporter over HTTP"
hport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN/xseg" exporter --segment "$SEG" --listen "127.0.0.1:$hport" 2> "$DIR/exporter.log" & exp=$!
pids+=($exp)
http() {   # PATH [RAW REQUEST]: prints "STATUS" then the body
	python3 - "$hport" "$@" <<'EOF'
import socket, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
raw = sys.argv[3].encode() if len(sys.argv) > 3 else (
    "GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode()
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        break
    except OSError:
        time.sleep(0.05)
s.sendall(raw)
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode().split(" ", 1)[1])
sys.stdout.write(body.decode())
EOF
}
http /metrics > "$DIR/scrape" || fail "GET /metrics failed"
[ "$(head -1 "$DIR/scrape")" = "200 OK" ] || fail "GET /metrics: $(head -3 "$DIR/scrape")"
tail -n +2 "$DIR/scrape" > "$DIR/prom2"
check_prometheus "$DIR/prom2" || fail "the exporter's text does not parse"
[ "$(http /nope | head -1)" = "404 Not Found" ] || fail "GET /nope is not 404"
[ "$(http /metrics $'POST /metrics HTTP/1.1\r\n\r\n' | head -1)" = "405 Method Not Allowed" ] ||
	fail "POST is not 405"
[ "$(http / $'garbage\r\n\r\n' | head -1)" = "400 Bad Request" ] || fail "garbage is not 400"
python3 -c "import socket; s=socket.create_connection(('127.0.0.1',$hport)); s.sendall(b'GET /met'); s.close()"
[ "$(http /metrics | head -1)" = "200 OK" ] || fail "the exporter stopped serving after bad requests"
if command -v curl > /dev/null; then
	curl -sf "http://127.0.0.1:$hport/metrics" | grep -q '^xseg_up{port="2"} 1$' || fail "curl GET /metrics"
fi
# a process that binds a port and never answers (not one of the project's
# clients): its port is reported down, and not asked again (each unanswered
# request stays out of the pool while its holder lives)
cp "$BIN/ipc-bench" "$DIR/quiet-client"
"$DIR/quiet-client" --segment "$SEG" --port 12 --target-port 5 --seconds 60 > /dev/null 2>&1 &
quiet=$!; pids+=($quiet)
wait_bound 12
http /metrics | grep -q '^xseg_up{port="12"} 0$' || fail "a port that does not answer is not down"
if command -v curl > /dev/null; then
	t=$(curl -s -o "$DIR/scrape3" -w '%{time_total}' "http://127.0.0.1:$hport/metrics")
	grep -q '^xseg_up{port="12"} 0$' "$DIR/scrape3" || fail "the silent port is gone from the scrape"
	python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1.5 else 1)" "$t" ||
		fail "the silent port was asked again (the scrape took $t s)"
fi
kill "$quiet"
kill -TERM "$exp"
wait "$exp"; rc=$?
[ $rc = 0 ] || fail "the exporter exited $rc on SIGTERM"

echo "--- bad arguments"
bad_arg "--watch" "$BIN/xseg" stats --segment "$SEG" --count 2
bad_arg "'0'" "$BIN/xseg" stats --segment "$SEG" --watch 0
bad_arg "--prometheus" "$BIN/xseg" stats --segment "$SEG" --json --prometheus
bad_arg "--listen" "$BIN/xseg" stats --segment "$SEG" --listen 127.0.0.1:1
bad_arg "example.org:80" "$BIN/xseg" exporter --segment "$SEG" --listen example.org:80
bad_arg "--listen" "$BIN/xseg" exporter --segment "$SEG"
bad_arg "99" "$BIN/xseg" stats --segment "$SEG" --port 99

echo "xseg stats: ok"
