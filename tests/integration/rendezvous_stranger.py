#!/usr/bin/env python3
"""A stranger at a job's rendezvous (msrun_launch.sh (g), torchrun_launch.sh (c)): node 1's registration to the
letter but for the job's secret, sent to node 0 on loopback without one and with a wrong one.

    rendezvous_stranger.py PORT JOB_LINE NODE0_LOG

Each connection must be answered `refused ...` naming the job secret; then node 0's log must name both refusals
with the peer's address and must not have counted the stranger's workers. Exits 1 with what went wrong."""
import re
import socket
import sys
import time

port, job, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for first in ["", "secret " + "0123456789abcdef" * 2 + "\n"]:  # none, then a wrong one
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall((first + "register 1 2 4 stranger\njob " + job + "\n").encode())
    reply = s.makefile().readline()
    print(repr(reply))
    if not (reply.startswith("refused ") and "job secret" in reply):
        sys.exit(f"the stranger was answered {reply!r}, not refused for the job secret")
wanted = ["refused a connection (127.0.0.1): no job secret", "refused a connection (127.0.0.1): a wrong job secret"]
for _ in range(50):  # node 0 logs a refusal after answering it
    text = open(log).read()
    if all(w in text for w in wanted):
        break
    time.sleep(0.1)
missing = [w for w in wanted if w not in text]
if missing:
    sys.exit(f"node 0's log ({log}) does not say {missing}:\n{text}")
if re.search(r"registered 2 worker\(s\)", text):
    sys.exit(f"node 0 counted the stranger:\n{text}")
print("refused twice, logged with the peer's address, not counted")
