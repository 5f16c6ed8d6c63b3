#!/usr/bin/env python3
"""NBD connections with WRITEs in flight while the server stops.

  nbd_stop_client.py write SOCK --conns N --writes W --go FILE --out FILE
      N connections to export "vol"; on each, W WRITEs of --block-size bytes
      (write i of connection c at offset (c * W + i) * --stride, a block of
      an object of its own: nothing orders them behind each other), sent
      without reading a reply; then "sent" on stdout. Once FILE --go exists
      (the test has made the server begin its stop), one more WRITE on each
      (at offset extra_offset(c), never written before), and on connection
      0 a DISC once that one is answered (the spec: a client that gets
      NBD_ESHUTDOWN initiates a soft disconnect). Then every reply is read
      until the server closes. --out gets one JSON object: per connection
      its replies {cookie: error} and how it ended ("closed", "reset",
      "timeout") and when (seconds after --go). Exits 0 either way: what it
      proves is in --out.
  nbd_stop_client.py read SOCK --offsets O,O,... --out FILE
      Reads each block back: --out gets {offset: "written" | "zeros" |
      "other"}.

A block's pattern names its offset, so no other block passes for it."""
import argparse
import json
import os
import socket
import struct
import sys
import time

from nbd_raw_client import READ, WRITE, DISC, REPLY_MAGIC, connect, handshake, request

args = None


def pattern(offset):
    return struct.pack(">QQ", offset, 0x5354) * (args.block_size // 16)


def extra_offset(c):
    return (args.conns * args.writes + c) * args.stride


def recv_exact(s, n):
    """nbd_raw_client's fails on a close; here a close is what is watched."""
    buf = bytearray()
    while len(buf) < n:
        r = s.recv(n - len(buf))
        if not r:
            raise EOFError()
        buf += r
    return bytes(buf)


def read_replies(s, t0, out):
    """Replies until the server ends the connection; how it ended, when."""
    try:
        while True:
            magic, error, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
            if magic != REPLY_MAGIC:
                return "bad reply magic %#x" % magic
            out["replies"][str(cookie)] = error
            if cookie >= 1 << 40 and out["disc"]:
                request(s, DISC, 0, 0, 0)
                out["disc_sent"] = True
    except EOFError:
        how = "closed"
    except (ConnectionResetError, BrokenPipeError):
        how = "reset"
    except socket.timeout:
        how = "timeout"
    out["ended_after"] = round(time.monotonic() - t0, 3) if t0 else None
    return how


def write_mode():
    conns = []
    for c in range(args.conns):
        s = connect(args.sock, timeout=60)
        handshake(s, b"vol")
        conns.append(s)
    for c, s in enumerate(conns):
        for i in range(args.writes):
            off = (c * args.writes + i) * args.stride
            request(s, WRITE, off, off, args.block_size, pattern(off))
    print("sent", flush=True)
    until = time.monotonic() + 120
    while not os.path.exists(args.go) and time.monotonic() < until:
        time.sleep(0.01)
    t0 = time.monotonic()
    result = []
    for c, s in enumerate(conns):
        out = {"replies": {}, "disc": c == 0, "extra_sent": False}
        off = extra_offset(c)
        try:
            request(s, WRITE, (1 << 40) + c, off, args.block_size, pattern(off))
            out["extra_sent"] = True
        except OSError as e:
            out["extra_error"] = str(e)
        result.append(out)
    for s, out in zip(conns, result):
        out["ended"] = read_replies(s, t0, out)
        s.close()
    with open(args.out, "w") as f:
        json.dump(result, f)


def read_mode():
    s = connect(args.sock, timeout=60)
    handshake(s, b"vol")
    seen = {}
    offsets = [int(o) for o in args.offsets.split(",")]
    for off in offsets:   # all at once: a slow disk takes them together
        request(s, READ, off, off, args.block_size)
    for _ in offsets:
        magic, error, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
        if magic != REPLY_MAGIC or error or cookie not in offsets:
            print("nbd_stop_client: read: magic %#x error %d cookie %d" % (magic, error, cookie))
            sys.exit(1)
        data = recv_exact(s, args.block_size)
        seen[str(cookie)] = ("written" if data == pattern(cookie) else
                             "zeros" if data == bytes(len(data)) else "other")
    request(s, DISC, 0, 0, 0)
    s.close()
    with open(args.out, "w") as f:
        json.dump(seen, f)


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("write", "read"))
    ap.add_argument("sock")
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--writes", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--stride", type=int, default=4 << 20)
    ap.add_argument("--go")
    ap.add_argument("--offsets")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    write_mode() if args.mode == "write" else read_mode()
    return 0


sys.exit(main())
