"""Where each rank runs on the test bed: its network namespace, and whether a message from rank 0 to the
last rank crossed the hosts' link (kiln0's sent bytes grow by the message: TCP, not shared memory).
Rank 0 prints every rank's namespace."""
import os

import numpy as np

import kiln
from common import check, ok


def link_tx():
    try:
        with open("/sys/class/net/kiln0/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return -1


r, n = kiln.dist.rank(), kiln.dist.size()
check(link_tx() >= 0, f"rank {r} has no kiln0 link: not started inside a host of the bed")
payload = np.arange(4 << 20, dtype="float32")  # 16 MB
kiln.dist.barrier()
before = link_tx()
if r == 0:
    kiln.dist.send(payload, n - 1)
elif r == n - 1:
    check(np.array_equal(kiln.dist.recv(payload.shape, "float32", 0), payload), "the message arrived changed")
kiln.dist.barrier()
sent = np.array([link_tx() - before], "int64")
ns = np.frombuffer(os.readlink("/proc/self/ns/net").encode().ljust(32), "uint8").copy()
names = [bytes(a).decode().strip() for a in kiln.dist.all_gather(ns)]
if r == 0:
    print("namespaces:", names, "link bytes sent:", int(sent[0]), flush=True)
    check(len(set(names)) >= 2, f"every rank in one namespace: {names}")
    check(int(sent[0]) >= payload.nbytes, f"rank 0's link sent {int(sent[0])} bytes for a {payload.nbytes}-byte message")
ok(names[r])
