#!/usr/bin/env python3
"""Acknowledged NBD writes, for a test that kills the server under them.

  nbd_acked_writes.py write SOCK --clients N --blocks B --round R --acked FILE
      N connections, each writing its own B 4K blocks of export "vol" once
      each (block i of client c at offset (c * B + i) * 4K), 16 in flight
      per connection, until every block is written or the server goes.
      The offsets whose reply said "done" go to FILE, one per line; the
      last line is "in-flight K", the writes sent and never answered.
      Exits 0 either way: what it proves is in FILE.
  nbd_acked_writes.py verify SOCK --round R --acked FILE
      Reads back every offset in FILE: each must hold round R's pattern.
  --block-size S (4096) and --depth D (16), the same for both modes:
      blocks of S bytes, D in flight per connection.

A block's pattern names its offset and the round, so a block of another
offset or round never passes for it. Exit 1 names the first bad block."""
import argparse
import struct
import sys
import threading

from nbd_raw_client import READ, WRITE, DISC, REPLY_MAGIC, connect, handshake, request

BLOCK, DEPTH = 4096, 16


def fail(why):
    print("nbd_acked_writes: %s" % why)
    sys.exit(1)


def pattern(offset, rnd):
    return struct.pack(">QQ", offset, rnd) * (BLOCK // 16)


def recv_exact(s, n):
    """nbd_raw_client's fails the test on a close; here a close is the kill."""
    buf = bytearray()
    while len(buf) < n:
        r = s.recv(n - len(buf))
        if not r:
            raise ConnectionError("closed")
        buf += r
    return bytes(buf)


def open_vol(path):
    s = connect(path, timeout=30)
    handshake(s, b"vol")
    return s


def reply(s):
    magic, error, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
    if magic != REPLY_MAGIC:
        raise ConnectionError("bad reply magic %#x" % magic)
    return error, cookie


def writer(path, client, blocks, rnd, acked, sent_unanswered, lock):
    try:
        s = open_vol(path)
    except OSError as e:
        fail("client %d cannot connect: %s" % (client, e))
    base = client * blocks
    out, nxt = set(), 0
    mine = []
    try:
        while nxt < blocks or out:
            while nxt < blocks and len(out) < DEPTH:
                off = (base + nxt) * BLOCK
                request(s, WRITE, off, off, BLOCK, pattern(off, rnd))
                out.add(off)
                nxt += 1
            error, cookie = reply(s)
            if cookie not in out:
                raise ConnectionError("reply to unknown cookie %d" % cookie)
            out.discard(cookie)
            if error == 0:
                mine.append(cookie)
    except (OSError, ConnectionError):
        pass   # the server went: what was answered stands
    with lock:
        acked.extend(mine)
        sent_unanswered[0] += len(out)
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("write", "verify"))
    ap.add_argument("sock")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=4096)
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--acked", required=True)
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=16)
    a = ap.parse_args()
    global BLOCK, DEPTH
    BLOCK, DEPTH = a.block_size, a.depth
    if a.mode == "write":
        acked, unanswered, lock = [], [0], threading.Lock()
        threads = [threading.Thread(target=writer, args=(a.sock, c, a.blocks, a.round, acked,
                                                         unanswered, lock))
                   for c in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with open(a.acked, "w") as f:
            f.writelines("%d\n" % off for off in sorted(acked))
            f.write("in-flight %d\n" % unanswered[0])
        return 0
    offsets = [int(line) for line in open(a.acked) if not line.startswith("in-flight")]
    s = open_vol(a.sock)
    for i in range(0, len(offsets), DEPTH):
        batch = offsets[i:i + DEPTH]
        for off in batch:
            request(s, READ, off, off, BLOCK)
        for _ in batch:
            error, cookie = reply(s)
            data = recv_exact(s, BLOCK) if error == 0 else b""
            if error:
                fail("read at %d: error %d" % (cookie, error))
            if data != pattern(cookie, a.round):
                got = struct.unpack(">QQ", data[:16])
                fail("block at %d holds offset %d round %d, not round %d: an acknowledged "
                     "write was lost" % (cookie, got[0], got[1], a.round))
    request(s, DISC, 0, 0, 0)
    s.close()
    print("%d acknowledged blocks of round %d read back" % (len(offsets), a.round))
    return 0


sys.exit(main())
