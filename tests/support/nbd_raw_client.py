#!/usr/bin/env python3
"""A hand-made NBD client for nbdd's end-to-end test: bytes no real client
sends (garbage handshakes, truncated and bad requests, a client that leaves
with requests in flight). Usage: nbd_raw_client.py SOCKET_PATH CASE.
Exits 0 when nbdd behaved as the case expects, else prints why and exits 1."""
import socket
import struct
import sys

MAGIC, IHAVEOPT = b"NBDMAGIC", b"IHAVEOPT"
OPT_GO, REP_ACK, REP_INFO = 7, 1, 3
REQ_MAGIC, REPLY_MAGIC = 0x25609513, 0x67446698
READ, WRITE, DISC, FLUSH = 0, 1, 2, 3
EINVAL, ENOSPC = 22, 28


def fail(why):
    print("nbd_raw_client: " + why)
    sys.exit(1)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            fail("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def closed_by_server(s):
    """True when the server closes the connection (reads end)."""
    try:
        while True:
            if not s.recv(4096):
                return True
    except ConnectionResetError:
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


def main():
    path, case = sys.argv[1], sys.argv[2]
    s = connect(path)
    if case == "garbage-handshake":
        recv_exact(s, 18)
        s.sendall(b"\xde\xad\xbe\xef" * 16)
        if not closed_by_server(s):
            fail("garbage handshake: connection stayed open")
    elif case == "bad-option-magic":
        recv_exact(s, 18)
        s.sendall(struct.pack(">I", 1) + b"IHAVEOPX" + struct.pack(">II", OPT_GO, 0))
        if not closed_by_server(s):
            fail("bad option magic: connection stayed open")
    elif case == "huge-option":
        recv_exact(s, 18)
        s.sendall(struct.pack(">I", 1) + IHAVEOPT + struct.pack(">II", OPT_GO, 1 << 30))
        if not closed_by_server(s):
            fail("1G option: connection stayed open")
    elif case == "unknown-export":
        recv_exact(s, 18)
        s.sendall(struct.pack(">I", 3))
        data = struct.pack(">I", 5) + b"nosuc" + struct.pack(">H", 0)
        s.sendall(IHAVEOPT + struct.pack(">II", OPT_GO, len(data)) + data)
        _, _, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
        if rtype != 0x80000006:
            fail("unknown export answered %#x, not NBD_REP_ERR_UNKNOWN" % rtype)
    elif case == "truncated-request":
        handshake(s, b"vol")
        s.sendall(struct.pack(">IHH", REQ_MAGIC, 0, READ))   # 8 of 28 bytes
        s.close()
    elif case == "truncated-payload":
        handshake(s, b"vol")
        request(s, WRITE, 1, 0, 65536, b"x" * 1000)
        s.close()
    elif case == "bad-request-magic":
        handshake(s, b"vol")
        s.sendall(struct.pack(">IHHQQI", 0x12345678, 0, READ, 1, 0, 512))
        if not closed_by_server(s):
            fail("bad request magic: connection stayed open")
    elif case == "errors":
        size = handshake(s, b"vol")
        request(s, READ, 11, size - 100, 4096)                      # beyond the end
        request(s, WRITE, 12, size, 8192, b"\xaa" * 8192)           # beyond, payload skipped
        request(s, READ, 13, 0, 64 << 20)                           # above the maximum
        request(s, 9, 14, 0, 512)                                   # unknown command
        request(s, READ, 15, 0, 512, flags=1)                       # FUA on a READ
        request(s, WRITE, 16, 4096, 8, b"12345678")                 # still in sync
        want = {11: EINVAL, 12: ENOSPC, 13: EINVAL, 14: EINVAL, 15: EINVAL, 16: 0}
        got = {}
        while len(got) < len(want):
            error, cookie = reply(s)
            got[cookie] = error
        if got != want:
            fail("errors: got %r, want %r" % (got, want))
        request(s, READ, 17, 4096, 8)   # after the write's reply: NBD does not order them
        error, cookie = reply(s)
        data = recv_exact(s, 8)
        if (error, cookie, data) != (0, 17, b"12345678"):
            fail("read after the errors: %r" % ((error, cookie, data),))
        request(s, DISC, 18, 0, 0)
        if not closed_by_server(s):
            fail("DISC: connection stayed open")
    elif case == "out-of-order":
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
        request(s, DISC, 4000, 0, 0)
    elif case == "leave-in-flight":
        handshake(s, b"vol")
        for i in range(32):
            request(s, WRITE, i, (i % 8) << 20, 1 << 20, b"\x5a" * (1 << 20))
        for i in range(32):
            request(s, READ, 100 + i, (i % 8) << 20, 1 << 20)
        s.close()   # without reading a single reply
    elif case in ("flow-control", "leave-paused"):
        # More replies than nbdd keeps unwritten (128M, 128 commands): it
        # stops reading this connection, and must resume once we read.
        handshake(s, b"vol")
        n = 300
        # in one send: as many small sends would fill a Unix socket's budget
        s.sendall(b"".join(struct.pack(">IHHQQI", REQ_MAGIC, 0, READ, 5000 + i,
                                       (i % 16) << 20, 1 << 20) for i in range(n)))
        if case == "leave-paused":
            import time
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
    else:
        fail("unknown case " + case)


main()
