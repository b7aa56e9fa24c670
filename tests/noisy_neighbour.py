#!/usr/bin/env python3
"""The standard noisy neighbour: what a shared CI runner or a busy host does beside a test.

Three parts, each in a process of its own, until killed or for --seconds:
  - a CPU hog in bursts on one core (busy 0.5-2 s, idle 1-3 s, pinned to the last core);
  - an unrelated listener with a backlog of 1 that never accepts, flooded with connection
    attempts until its queue overflows (the host's TcpExt ListenOverflows count them);
  - a process faulting pages: 64 MiB mapped, touched page by page, unmapped, in bursts.

Run the tests beside it: python3 tests/noisy_neighbour.py --seconds 1800 & bash scripts/test.sh
"""

import argparse
import mmap
import multiprocessing
import os
import random
import signal
import socket
import time


def cpu_hog(end, rng):
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1]})
    while time.monotonic() < end:
        busy_until = time.monotonic() + rng.uniform(0.5, 2.0)
        while time.monotonic() < busy_until:
            pass
        time.sleep(rng.uniform(1.0, 3.0))


def overflowing_listener(end, rng):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    held = []
    while time.monotonic() < end:
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        held.append(c)
        # the kernel retries each dropped SYN; a few hundred half-open attempts keep the
        # queue overflowing without running the process out of descriptors
        if len(held) > 300:
            for c in held:
                c.close()
            held = []
        time.sleep(rng.uniform(0.01, 0.05))


def page_faulter(end, rng):
    size = 64 << 20
    page = mmap.PAGESIZE
    while time.monotonic() < end:
        m = mmap.mmap(-1, size)
        for offset in range(0, size, page):
            m[offset] = 1
        m.close()
        time.sleep(rng.uniform(0.2, 1.5))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    end = time.monotonic() + args.seconds
    parts = [cpu_hog, overflowing_listener, page_faulter]
    procs = [
        multiprocessing.Process(target=part, args=(end, random.Random(args.seed + i)), daemon=True)
        for i, part in enumerate(parts)
    ]
    for p in procs:
        p.start()

    def stop(*_):
        for p in procs:
            p.terminate()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
