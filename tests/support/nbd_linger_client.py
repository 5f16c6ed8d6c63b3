#!/usr/bin/env python3
"""Readers at nbdd's stop (tests/test_nbdd_stop_linger.sh).

  nbd_linger_client.py HOST:PORT --size N --sent FILE [--go FILE]
                       [--mode late|steady|stuck] [--hold S]

Connects with a small receive buffer, sends a READ of --size bytes and
reads nothing: the reply waits in the server's send queue. Writes --sent.
late (the default): waits for --go (the server's stop has begun and had
time to close), sends one more command (as a client does that does not
yet know of the stop), then reads. steady: waits for --go, then reads.
stuck: reads nothing for --hold seconds, then exits. late and steady
print one JSON object: the bytes of the READ's reply received and how
the connection ended ("eof", "reset")."""
import argparse
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_raw_client as nbd  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("addr")
p.add_argument("--size", type=int, required=True)
p.add_argument("--go")
p.add_argument("--sent", required=True)
p.add_argument("--mode", choices=("late", "steady", "stuck"), default="late")
p.add_argument("--hold", type=float, default=30)
args = p.parse_args()

host, port = args.addr.rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)   # before connect: the window
s.settimeout(30)
s.connect((host, int(port)))
nbd.handshake(s, b"vol")
nbd.request(s, nbd.READ, 1, 0, args.size)
open(args.sent, "w").close()
if args.mode == "stuck":
    time.sleep(args.hold)
    sys.exit(0)
while not os.path.exists(args.go):
    time.sleep(0.02)
if args.mode == "late":
    try:
        nbd.request(s, nbd.READ, 2, 0, 4096)
    except OSError:
        pass   # already reset
got, end = 0, "eof"
try:
    while True:
        r = s.recv(1 << 16)
        if not r:
            break
        got += len(r)
except ConnectionResetError:
    end = "reset"
except socket.timeout:
    end = "timeout"
# the reply's 16-byte header, then the data
print(json.dumps({"received": got, "wanted": 16 + args.size, "end": end}))
