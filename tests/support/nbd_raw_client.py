#!/usr/bin/env python3
"""A hand-made NBD client for nbdd's end-to-end test: bytes no real client
sends (garbage handshakes, truncated and bad requests, a client that leaves
with requests in flight, floods) and checks no real client makes (replies
out of order, FUA reaching the disk, nbdd's CPU and memory under abuse).

Usage: nbd_raw_client.py ADDR CASE [--pid PID] [--log FILE] [--data DIR]
ADDR is a Unix socket path or HOST:PORT. --pid is nbdd's (cases that watch
its CPU, memory or file descriptors), --log its log, --data filed's --dir.
Exits 0 when nbdd behaved as the case expects, else prints why and exits 1."""
import argparse
import os
import socket
import struct
import sys
import time

MAGIC, IHAVEOPT = b"NBDMAGIC", b"IHAVEOPT"
OPT_LIST, OPT_GO, REP_ACK, REP_SERVER, REP_INFO = 3, 7, 1, 2, 3
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO = 1, 2, 6
REQ_MAGIC, REPLY_MAGIC = 0x25609513, 0x67446698
READ, WRITE, DISC, FLUSH, TRIM, WRITE_ZEROES = 0, 1, 2, 3, 4, 6
FLAG_FUA, FLAG_NO_HOLE = 1, 2
EINVAL, ENOSPC = 22, 28
OBJECT_SIZE = 4 << 20   # vlmcd's default --object-size

args = None


def fail(why):
    print("nbd_raw_client %s: %s" % (args.case if args else "", why))
    sys.exit(1)


def connect(addr=None, timeout=20):
    addr = addr or args.addr
    if "/" not in addr and ":" in addr:
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
    return s


def recv_exact(s, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        r = s.recv_into(view[got:], n - got)
        if not r:
            fail("connection closed after %d of %d bytes" % (got, n))
        got += r
    return bytes(buf)


def closed_by_server(s):
    """True when the server closes the connection (reads end) before the
    socket's timeout."""
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def handshake(s, export):
    hello = recv_exact(s, 18)
    if hello[:16] != MAGIC + IHAVEOPT:
        fail("bad greeting %r" % hello)
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", len(export)) + export + struct.pack(">H", 0)
    s.sendall(IHAVEOPT + struct.pack(">II", OPT_GO, len(data)) + data)
    size = None
    while True:
        _, opt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
        body = recv_exact(s, length)
        if rtype == REP_INFO and struct.unpack(">H", body[:2])[0] == 0:
            size = struct.unpack(">Q", body[2:10])[0]
        elif rtype == REP_ACK:
            return size
        elif rtype & 0x80000000:
            fail("GO refused: %#x" % rtype)


def request(s, cmd, cookie, offset, length, payload=b"", flags=0):
    s.sendall(struct.pack(">IHHQQI", REQ_MAGIC, flags, cmd, cookie, offset, length) + payload)


def reply(s):
    magic, error, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
    if magic != REPLY_MAGIC:
        fail("bad reply magic %#x" % magic)
    return error, cookie


def write(s, cookie, offset, data, flags=0):
    request(s, WRITE, cookie, offset, len(data), data, flags)
    error, got = reply(s)
    if (error, got) != (0, cookie):
        fail("write of %d bytes at %d: error %d, cookie %d" % (len(data), offset, error, got))


def read(s, cookie, offset, length, flags=0):
    request(s, READ, cookie, offset, length, flags=flags)
    error, got = reply(s)
    if (error, got) != (0, cookie):
        fail("read of %d bytes at %d: error %d, cookie %d" % (length, offset, error, got))
    return recv_exact(s, length)


def served(why, io=True):
    """A new client gets through the handshake and a read (or only the
    handshake: not io): nbdd still serves."""
    s = connect()
    handshake(s, b"vol")
    if io:
        read(s, 1, 0, 4096)
    request(s, DISC, 2, 0, 0)
    if not closed_by_server(s):
        fail(why + ": DISC did not close the connection")
    s.close()


# ---- what nbdd spends ----------------------------------------------------------------

def cpu_seconds():
    fields = open("/proc/%d/stat" % args.pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def rss_anon_kb():
    """Anonymous resident memory: what malloc holds. (VmRSS also counts the
    segment's shared pages, which the earlier clients touched.)"""
    for line in open("/proc/%d/status" % args.pid):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    fail("no RssAnon in /proc/%d/status" % args.pid)


def vm_rss_kb():
    """nbdd's resident memory as top shows it (VmRSS: malloc's and the
    segment's pages it touched)."""
    for line in open("/proc/%d/status" % args.pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    fail("no VmRSS in /proc/%d/status" % args.pid)


def assert_idle_cpu(why, seconds=1.5, share=0.3, windows=5):
    """nbdd settles to under `share` of a core over `seconds`. Only CPU time
    is measured: a loaded machine slows nbdd down, it cannot make it use
    more. Work still in flight (replies being copied, slowly under the
    sanitizers) is finite, so up to `windows` windows are tried; a spinning
    thread fails them all."""
    for _ in range(windows):
        c0 = cpu_seconds()
        time.sleep(seconds)
        used = cpu_seconds() - c0
        if used <= share * seconds:
            return
    fail("%s: nbdd used %.2f s of CPU in %.1f s, %d times running"
         % (why, used, seconds, windows))


def log_lines(word):
    with open(args.log, errors="replace") as f:
        return sum(1 for line in f if word in line)


# ---- cases ------------------------------------------------------------------------------

def garbage_handshake(s):
    recv_exact(s, 18)
    s.sendall(b"\xde\xad\xbe\xef" * 16)
    if not closed_by_server(s):
        fail("garbage handshake: connection stayed open")


def bad_option_magic(s):
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 1) + b"IHAVEOPX" + struct.pack(">II", OPT_GO, 0))
    if not closed_by_server(s):
        fail("bad option magic: connection stayed open")


def huge_option(s):
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 1) + IHAVEOPT + struct.pack(">II", OPT_GO, 1 << 30))
    if not closed_by_server(s):
        fail("1G option: connection stayed open")


def abort(s):
    """NBD_OPT_ABORT: an ACK, then nbdd closes the connection (the client
    waits for that, not for --io-timeout), over TCP too."""
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 3) + IHAVEOPT + struct.pack(">II", OPT_ABORT, 0))
    _, opt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
    if (opt, rtype, length) != (OPT_ABORT, REP_ACK, 0):
        fail("ABORT answered %r" % ((opt, rtype, length),))
    s.settimeout(5)
    if not closed_by_server(s):
        fail("ABORT: the connection stayed open 5 s after the ACK")
    s.close()
    served("after ABORT", io=False)


def unknown_export(s):
    """GO and INFO on a name nbdd does not serve: NBD_REP_ERR_UNKNOWN, the
    handshake goes on; the old EXPORT_NAME has no error reply: the server
    closes (the spec)."""
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", 5) + b"nosuc" + struct.pack(">H", 0)
    for opt in (OPT_GO, OPT_INFO):
        s.sendall(IHAVEOPT + struct.pack(">II", opt, len(data)) + data)
        _, ropt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
        recv_exact(s, length)
        if ropt != opt or rtype != 0x80000006:
            fail("unknown export in option %d answered %#x to %d, not NBD_REP_ERR_UNKNOWN"
                 % (opt, rtype, ropt))
    s.sendall(IHAVEOPT + struct.pack(">II", OPT_EXPORT_NAME, 5) + b"nosuc")
    s.settimeout(5)
    try:
        extra = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        extra = b""
    except socket.timeout:
        fail("unknown export in NBD_OPT_EXPORT_NAME: the connection stayed open")
    if extra:
        fail("unknown export in NBD_OPT_EXPORT_NAME answered %r, not a close" % extra[:32])


def stalled(s, what, send_part):
    """For an nbdd with a short --io-timeout: a client that sends part of a
    message and stays connected is closed by the server; a connection idle
    between requests all that time is not, and still works after."""
    other = connect()
    handshake(other, b"vol")
    before = log_lines("--io-timeout")
    send_part(s)
    if not closed_by_server(s):
        fail("%s: still open after 20 s" % what)
    if log_lines("--io-timeout") != before + 1:
        fail("%s: closed without its line in the log" % what)
    write(other, 1, 123456, b"still here")
    if read(other, 2, 123456, 10) != b"still here":
        fail("%s: the idle connection read back wrong data" % what)
    request(other, DISC, 3, 0, 0)
    if not closed_by_server(other):
        fail("%s: DISC did not close the idle connection" % what)


def truncated_request(s):
    def part(s):
        handshake(s, b"vol")
        s.sendall(struct.pack(">IHH", REQ_MAGIC, 0, READ))   # 8 of 28 bytes
    stalled(s, "8 bytes of a request header", part)


def truncated_payload(s):
    def part(s):
        handshake(s, b"vol")
        request(s, WRITE, 1, 0, 65536, b"x" * 1000)
    stalled(s, "1000 bytes of a 64K WRITE", part)


def stalled_handshake(s):
    def part(s):
        recv_exact(s, 18)
        s.sendall(b"\0\0")   # half the client flags
    stalled(s, "half the client flags", part)


def unread_replies(s):
    def part(s):
        handshake(s, b"vol")
        before = log_lines("--io-timeout")
        s.sendall(b"".join(struct.pack(">IHHQQI", REQ_MAGIC, 0, READ, 7000 + i,
                                       (i % 16) << 20, 1 << 20) for i in range(300)))
        # read nothing: the replies fill the socket and stall, until nbdd
        # closes it (its line; 20 s at most, stalled() then fails)
        deadline = time.time() + 20
        while log_lines("--io-timeout") == before and time.time() < deadline:
            time.sleep(0.05)
    stalled(s, "300M of replies left unread", part)


def bad_request_magic(s):
    handshake(s, b"vol")
    s.sendall(struct.pack(">IHHQQI", 0x12345678, 0, READ, 1, 0, 512))
    if not closed_by_server(s):
        fail("bad request magic: connection stayed open")


def errors(s):
    size = handshake(s, b"vol")
    request(s, READ, 11, size - 100, 4096)                      # beyond the end
    request(s, WRITE, 12, size, 8192, b"\xaa" * 8192)           # beyond, payload skipped
    request(s, READ, 13, 0, 64 << 20)                           # above the maximum
    request(s, 9, 14, 0, 512)                                   # unknown command
    request(s, READ, 15, 0, 512, flags=FLAG_NO_HOLE)            # a write's flag on a READ
    request(s, FLUSH, 19, 0, 0, flags=FLAG_NO_HOLE)             # and on a FLUSH
    request(s, WRITE, 16, 4096, 8, b"12345678")                 # still in sync
    want = {11: EINVAL, 12: ENOSPC, 13: EINVAL, 14: EINVAL, 15: EINVAL, 19: EINVAL, 16: 0}
    got = {}
    while len(got) < len(want):
        error, cookie = reply(s)
        got[cookie] = error
    if got != want:
        fail("errors: got %r, want %r" % (got, want))
    # after the write's reply: NBD does not order them. FUA is announced, so
    # it must be taken on every command (the spec), READ, FLUSH, DISC too.
    if read(s, 17, 4096, 8, flags=FLAG_FUA) != b"12345678":
        fail("read with FUA after the errors: wrong data")
    request(s, FLUSH, 20, 0, 0, flags=FLAG_FUA)
    if reply(s) != (0, 20):
        fail("FLUSH with FUA refused")
    # DISC has no reply, whatever its flags (one it does not know too)
    request(s, DISC, 18, 0, 0, flags=FLAG_FUA | FLAG_NO_HOLE)
    try:
        extra = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        extra = b""
    except socket.timeout:
        fail("DISC with flags: connection stayed open")
    if extra:
        fail("DISC with flags: %d bytes of reply (DISC has none)" % len(extra))


def out_of_order(s):
    handshake(s, b"vol")
    # many in flight at once; replies may come in any order
    for i in range(64):
        request(s, WRITE, 1000 + i, i * 65536, 65536, bytes([i]) * 65536, flags=1 if i % 3 == 0 else 0)
    request(s, FLUSH, 2000, 0, 0)
    seen = set()
    for _ in range(65):
        error, cookie = reply(s)
        if error:
            fail("write %d failed: %d" % (cookie, error))
        seen.add(cookie)
    if seen != set(range(1000, 1064)) | {2000}:
        fail("replies lost or duplicated")
    for i in range(64):
        request(s, READ, 3000 + i, i * 65536, 65536)
    for _ in range(64):
        error, cookie = reply(s)
        data = recv_exact(s, 65536)
        if error or data != bytes([cookie - 3000]) * 65536:
            fail("read %d returned wrong data" % cookie)
    # Replies are sent as commands finish: a 16M READ (16 chunks on the
    # path) sent first, a 512-byte READ right after it. The small one
    # overtakes the big one nearly always; one overtake in ten tries proves
    # it happens without hanging the test on one unlucky schedule. (Not a
    # 32M READ: that fills --max-client-buffer, 32M, and nothing more is
    # read from the connection until it is written.)
    big, small = 16 << 20, 512
    overtaken = 0
    for attempt in range(10):
        request(s, READ, 5000, 0, big)
        request(s, READ, 5001, 40 << 20, small)
        order = []
        for _ in range(2):
            error, cookie = reply(s)
            if error:
                fail("read %d failed: %d" % (cookie, error))
            recv_exact(s, big if cookie == 5000 else small)
            order.append(cookie)
        if sorted(order) != [5000, 5001]:
            fail("out of order: replies %r" % order)
        if order[0] == 5001:
            overtaken += 1
            break
    if not overtaken:
        fail("a 512-byte READ never overtook a 16M READ in 10 tries: replies in order")
    request(s, DISC, 4000, 0, 0)


def batched_replies(s):
    """Many small commands in one send: nbdd writes the replies a worker
    takes in one round with one write. Each must arrive whole (a header,
    then its READ's data, never another's bytes in between), once."""
    handshake(s, b"vol")
    n, size = 96, 4096
    def pattern(i):
        return bytes([i & 0xff, 0xa5]) * (size // 2)
    s.sendall(b"".join(struct.pack(">IHHQQI", REQ_MAGIC, 0, WRITE, 7000 + i,
                                   (8 << 20) + i * size, size) + pattern(i)
                       for i in range(n)))
    seen = set()
    for _ in range(n):
        error, cookie = reply(s)
        if error or cookie in seen or not 7000 <= cookie < 7000 + n:
            fail("batched write: error %d, cookie %d" % (error, cookie))
        seen.add(cookie)
    # reads mixed with zero-length ones: replies with and without data
    reqs = []
    for i in range(n):
        reqs.append(struct.pack(">IHHQQI", REQ_MAGIC, 0, READ, 8000 + i,
                                (8 << 20) + i * size, size))
        if i % 8 == 0:
            reqs.append(struct.pack(">IHHQQI", REQ_MAGIC, 0, FLUSH, 9000 + i, 0, 0))
    s.sendall(b"".join(reqs))
    seen = set()
    for _ in range(len(reqs)):
        error, cookie = reply(s)
        if error or cookie in seen:
            fail("batched read: error %d, cookie %d" % (error, cookie))
        seen.add(cookie)
        if 8000 <= cookie < 8000 + n and recv_exact(s, size) != pattern(cookie - 8000):
            fail("batched read %d: wrong data (replies interleaved?)" % cookie)
    if len(seen) != len(reqs):
        fail("batched read: replies lost")
    request(s, DISC, 1, 0, 0)


def leave_in_flight(s):
    handshake(s, b"vol")
    for i in range(32):
        request(s, WRITE, i, (i % 8) << 20, 1 << 20, b"\x5a" * (1 << 20))
    for i in range(32):
        request(s, READ, 100 + i, (i % 8) << 20, 1 << 20)
    s.close()   # without reading a single reply


def flow_control(s, leave=False):
    # More replies than nbdd keeps unwritten (--max-client-buffer 32M,
    # 128 commands): it stops reading this connection, and must resume once
    # we read (a client that reads is paced, never closed for it).
    handshake(s, b"vol")
    n = 300
    # in one send: as many small sends would fill a Unix socket's budget
    s.sendall(b"".join(struct.pack(">IHHQQI", REQ_MAGIC, 0, READ, 5000 + i,
                                   (i % 16) << 20, 1 << 20) for i in range(n)))
    if leave:
        time.sleep(0.5)
        s.close()
        return
    seen = set()
    for _ in range(n):
        error, cookie = reply(s)
        recv_exact(s, 1 << 20)
        if error:
            fail("read %d failed: %d" % (cookie, error))
        seen.add(cookie)
    if seen != set(range(5000, 5000 + n)):
        fail("flow control: replies lost or duplicated")
    request(s, DISC, 1, 0, 0)


def disc_then_bytes(s):
    """Bytes after DISC, while replies wait unread: nbdd must stop reading,
    not wake up for them again and again (it used to spin a core)."""
    handshake(s, b"vol")
    for i in range(8):
        request(s, READ, i, i << 20, 1 << 20)
    reply(s)   # the replies are being written: more than the socket takes
    request(s, DISC, 99, 0, 0)
    s.sendall(b"after DISC" * 20000)   # more than one read of nbdd's buffer
    time.sleep(0.2)
    assert_idle_cpu("bytes after DISC")
    s.close()
    served("after bytes after DISC")


def handshake_flood(s):
    """LIST options sent without reading a reply: nbdd must stop reading
    once the unsent replies pass a bound (it queued them all: 200 MB of
    options made it 2.4 GB), and serve other clients meanwhile."""
    before = rss_anon_kb()
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 1))
    block = (IHAVEOPT + struct.pack(">II", OPT_LIST, 0)) * 4096   # 64K
    s.settimeout(2)
    sent, how = 0, "all sent"
    try:
        while sent < 16 << 20:
            s.sendall(block)
            sent += len(block)
    except socket.timeout:
        how = "nbdd stopped reading"
    except (ConnectionResetError, BrokenPipeError):
        how = "nbdd closed the connection"
    grown = rss_anon_kb() - before
    if grown > 16 << 10:
        fail("%d KB of options (%s): nbdd grew by %d KB" % (sent >> 10, how, grown))
    if how == "all sent":
        fail("nbdd read all 16M of options and still holds the connection")
    served("while a client floods options")
    s.close()


def at_fd_limit(s):
    """Run with nbdd's open files limit a few above what it has open: 40
    connections, most left queued in the listen backlog, where accept fails
    with EMFILE. nbdd must rest, not retry at once (it spun a core and
    logged 88 MB in 3 s), and serve again once they are gone. Handshakes
    only: see the test script for why this nbdd sends nothing."""
    before = log_lines("accept on")
    conns = [s] + [connect() for _ in range(40)]
    time.sleep(0.3)
    assert_idle_cpu("connections past the open files limit")
    logged = log_lines("accept on") - before
    if not logged:
        fail("no failed accept logged: the open files limit did not apply")
    if logged > 4:
        fail("%d lines about failed accepts in 2 s" % logged)
    for c in conns:
        c.close()
    served("after the connections at the open files limit left", io=False)


def on_disk(offset, data):
    """Whether filed's object files hold `data` at volume `offset`: vlmcd
    names the objects VOLUME_<index as 16 hex digits>, filed keeps each as
    a file of that name under its --dir."""
    got = b""
    while len(got) < len(data):
        pos = offset + len(got)
        index, within = divmod(pos, OBJECT_SIZE)
        want = min(len(data) - len(got), OBJECT_SIZE - within)
        try:
            with open(os.path.join(args.data, "vol_%016x" % index), "rb") as f:
                f.seek(within)
                part = f.read(want)
        except FileNotFoundError:
            return False
        if len(part) < want:
            return False
        got += part
    return got == data


def fua(s):
    """With cached write-back between vlmcd and filed: a WRITE with FUA is
    in filed's files when its reply comes, without any FLUSH. One without
    FUA is not yet, or this would prove nothing."""
    handshake(s, b"vol")
    plain = os.urandom(8192)
    write(s, 1, (48 << 20) + 4096, plain)
    if on_disk((48 << 20) + 4096, plain):
        fail("a WRITE without FUA is on disk at once: cached is not write-back, "
             "the FUA check would prove nothing")
    # across two objects, at unaligned ends
    offset, data = (52 << 20) - 3000, os.urandom(10000)
    write(s, 2, offset, data, flags=FLAG_FUA)
    if not on_disk(offset, data):
        fail("a WRITE with FUA was answered before its bytes reached filed")
    request(s, DISC, 3, 0, 0)


def zeroes(s):
    """WRITE_ZEROES and TRIM over bytes written first (a range never written
    reads as zeros whatever they do): aligned and not, one over chunk
    boundaries, with and without FUA and NO_HOLE. Zeros read back there,
    the bytes around them are untouched."""
    handshake(s, b"vol")
    base, size = 16 << 20, 4 << 20   # not where the script reads back later
    expect = bytearray((i * 7) % 255 + 1 for i in range(size))   # no zero byte
    write(s, 1, base, bytes(expect))
    ops = [(WRITE_ZEROES, 0, 65536, 0),
           (WRITE_ZEROES, 131072 + 4097, 10000, FLAG_NO_HOLE),
           (WRITE_ZEROES, (1 << 20) - 5, (1 << 20) + 12345, FLAG_FUA),   # 3 chunks
           (TRIM, 3 << 20, 65536, 0),
           (TRIM, (3 << 20) + 100001, 12345, FLAG_FUA)]
    for cookie, (cmd, off, length, flags) in enumerate(ops, 10):
        request(s, cmd, cookie, base + off, length, flags=flags)
        error, got = reply(s)
        if (error, got) != (0, cookie):
            fail("%s of %d at +%d: error %d" % ("TRIM" if cmd == TRIM else "WRITE_ZEROES",
                                                length, off, error))
        expect[off:off + length] = bytes(length)
    data = read(s, 20, base, size)
    if data != expect:
        at = next(i for i in range(size) if data[i] != expect[i])
        fail("byte %d of the range: %#x, expected %#x" % (at, data[at], expect[at]))
    request(s, DISC, 21, 0, 0)


def non_readers(s):
    """--clients connections each send 300 1M READs and never read a reply;
    a well-behaved connection writes and reads back meanwhile. nbdd's VmRSS
    stays under --rss-mb above what it was (two such clients took it to
    285 MB: each held 128M of replies), and its malloc'd part (RssAnon, the
    replies: VmRSS also counts the segment's pages) under --anon-mb; every
    non-reader is closed with a
    line naming it and --max-client-buffer, and the good one keeps being
    served, right to the end."""
    rss0, anon0 = vm_rss_kb(), rss_anon_kb()
    peak, anon_peak = rss0, anon0
    before = log_lines("of replies it does not read")
    s.close()
    good = connect()
    handshake(good, b"vol")
    bad = []
    for c in range(args.clients):
        b = connect()
        handshake(b, b"vol")
        b.sendall(b"".join(struct.pack(">IHHQQI", REQ_MAGIC, 0, READ, 1000 * c + i,
                                       (i % 16) << 20, 1 << 20) for i in range(300)))
        bad.append(b)
    deadline, ops, closed = time.time() + 20, 0, 0
    while time.time() < deadline:
        off = (32 << 20) + (ops % 64) * 65536
        data = bytes([ops % 251 + 1]) * 65536
        write(good, 2 * ops + 1, off, data)
        if read(good, 2 * ops + 2, off, 65536) != data:
            fail("the good client read back wrong data")
        ops += 1
        peak, anon_peak = max(peak, vm_rss_kb()), max(anon_peak, rss_anon_kb())
        closed = log_lines("of replies it does not read") - before
        if closed >= args.clients and ops >= 20:
            break
        time.sleep(0.02)
    grown, anon_grown = (peak - rss0) >> 10, (anon_peak - anon0) >> 10
    print("non-readers: VmRSS %d MB, peak %d MB (+%d MB, of which malloc's +%d MB); "
          "%d of %d closed; %d good writes"
          % (rss0 >> 10, peak >> 10, grown, anon_grown, closed, args.clients, ops))
    if args.rss_mb and grown > args.rss_mb:
        fail("%d clients not reading: nbdd's VmRSS grew by %d MB (at most %d)"
             % (args.clients, grown, args.rss_mb))
    if args.anon_mb and anon_grown > args.anon_mb:
        fail("%d clients not reading: nbdd's malloc'd memory (RssAnon) grew by %d MB "
             "(at most %d)" % (args.clients, anon_grown, args.anon_mb))
    if closed < args.clients:
        fail("%d of %d clients not reading were closed (with their line) in 20 s"
             % (closed, args.clients))
    with open(args.log, errors="replace") as f:
        lines = [l for l in f if "of replies it does not read" in l][before:]
    for line in lines:
        if "unix client" not in line and "127.0.0.1" not in line or \
                "--max-client-buffer" not in line:
            fail("the line does not name the client and the limit: %s" % line.strip())
    for b in bad:   # closed by nbdd: reading ends (after what was sent)
        b.settimeout(5)
        try:
            while b.recv(1 << 20):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        except socket.timeout:
            fail("a client that was logged as closed is still connected")
        b.close()
    # the good client goes on, reading big replies too
    for i in range(8):
        read(good, 10000 + i, i << 20, 1 << 20)
    request(good, DISC, 3, 0, 0)
    if not closed_by_server(good):
        fail("DISC did not close the good client")


def max_connections(s):
    """For an nbdd with --max-connections 2: a third client is not taken
    (no greeting) while two are open, and is served once one closes."""
    handshake(s, b"vol")
    second = connect()
    handshake(second, b"vol")
    third = connect()   # the kernel queues it in the listen backlog
    third.settimeout(1)
    try:
        fail("a third connection got %r with two open" % third.recv(18))
    except socket.timeout:
        pass   # a loaded machine cannot make this pass wrongly: nbdd sends nothing
    if log_lines("--max-connections") < 1:
        fail("nothing logged about --max-connections")
    third.settimeout(20)
    s.close()
    handshake(third, b"vol")
    read(third, 1, 0, 512)
    request(third, DISC, 2, 0, 0)
    request(second, DISC, 3, 0, 0)
    if not closed_by_server(third) or not closed_by_server(second):
        fail("DISC did not close")


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("case")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--log")
    ap.add_argument("--data")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rss-mb", type=int, default=0)   # 0: not checked
    ap.add_argument("--anon-mb", type=int, default=0)
    args = ap.parse_args()
    cases = {
        "garbage-handshake": garbage_handshake,
        "bad-option-magic": bad_option_magic,
        "huge-option": huge_option,
        "unknown-export": unknown_export,
        "abort": abort,
        "truncated-request": truncated_request,
        "truncated-payload": truncated_payload,
        "unread-replies": unread_replies,
        "bad-request-magic": bad_request_magic,
        "errors": errors,
        "out-of-order": out_of_order,
        "batched-replies": batched_replies,
        "leave-in-flight": leave_in_flight,
        "flow-control": flow_control,
        "leave-paused": lambda s: flow_control(s, leave=True),
        "disc-then-bytes": disc_then_bytes,
        "handshake-flood": handshake_flood,
        "at-fd-limit": at_fd_limit,
        "stalled-handshake": stalled_handshake,
        "fua": fua,
        "zeroes": zeroes,
        "max-connections": max_connections,
        "non-readers": non_readers,
    }
    if args.case not in cases:
        fail("unknown case")
    s = connect()
    cases[args.case](s)


if __name__ == "__main__":   # nbd_acked_writes.py imports its client
    main()
