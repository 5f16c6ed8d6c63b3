#!/usr/bin/env python3
# Plays systemd's notify socket for the tests (test_systemd.sh,
# test_systemd_units.sh): notify_listener.py SOCKET XSEG SEGMENT binds a
# unix datagram socket at SOCKET, touches SOCKET.ready, then prints one
# line per datagram, "pid=P bound=B MSG" (P the sender's pid from its
# credentials, MSG's newlines as spaces); for READY=1, B says whether
# `XSEG info --segment SEGMENT` shows a live port owned by P right then
# ("yes"/"no"; "-" for other messages). Runs until killed.
import json, socket, struct, subprocess, sys
path, xseg, seg = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(path)
open(path + ".ready", "w").close()
while True:
    msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = 0
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", data[:12])[0]
    text = msg.decode(errors="replace")
    bound = "-"
    if "READY=1" in text.split("\n"):
        out = subprocess.run([xseg, "info", "--segment", seg, "--json"],
                             capture_output=True, text=True).stdout
        ports = json.loads(out)["port_list"] if out else []
        bound = "yes" if any(p["owner"] == pid and p["alive"] for p in ports) else "no"
    print(f"pid={pid} bound={bound} {text.replace(chr(10), ' ')}", flush=True)
