#!/usr/bin/env python3
"""The e2e binary's wall time, simulated from a turn log (KILN_TEST_TURNS=FILE).

Each line of the log is "seconds kind test": how long the test held its turn. libtest starts
tests in name order on THREADS threads; a started test waits for its turn
(crates/kiln/tests/e2e/common): `alone` tests one at a time, a module's group two at a time,
`beside` tests four at a time, and never two kinds at once. Two rules for who goes next:

- fifo: the turns before 084135f. A test of another kind waiting stops the kind holding the
  machine from taking more; the machine goes to the first test that waits.
- batch: the turns since. The kind holding the machine takes more up to its limit; when it is
  free it goes to the kind with the most tests waiting.

It gave the five fresh-clone runs of e539562 (libtest's two threads, fifo) within a second of
their measured times. Usage: scripts/turns_sim.py TURNS_FILE [THREADS...]
"""

import collections
import heapq
import sys

GROUP_AT_ONCE = 2
BESIDE_AT_ONCE = 4


def limit(kind):
    return 1 if kind == "alone" else BESIDE_AT_ONCE if kind == "beside" else GROUP_AT_ONCE


def read(path):
    tests = []
    with open(path) as f:
        for line in f:
            seconds, kind, name = line.split()
            tests.append((name, kind, float(seconds)))
    return sorted(tests)


def next_kind(waiting):
    """The harness's `Turns::next_kind`: the kind with the most tests waiting, of equals the one
    that came first (a Counter keeps the order kinds came in, and max keeps the first)."""
    counts = collections.Counter(kind for _, kind, _ in waiting)
    return max(counts, key=counts.get)


def simulate(tests, threads, rule):
    queue = list(tests)
    waiting = []  # (arrival, kind, seconds)
    running = []  # heap of end times
    holder, held, now, arrival, free_threads = None, 0, 0.0, 0, threads
    while queue or waiting or running:
        while free_threads and queue:
            _, kind, seconds = queue.pop(0)
            waiting.append((arrival, kind, seconds))
            arrival += 1
            free_threads -= 1
        admitted = True
        while admitted:
            admitted = False
            best = next_kind(waiting) if rule == "batch" and waiting else None
            for test in waiting:
                when, kind, seconds = test
                if holder is None:
                    if best is not None and kind != best:
                        continue
                elif holder != kind or held >= limit(kind):
                    continue
                elif rule == "fifo" and any(k != holder and w < when for w, k, _ in waiting):
                    continue
                holder, held = kind, held + 1
                waiting.remove(test)
                heapq.heappush(running, now + seconds)
                admitted = True
                break
        if not running:
            break
        now = heapq.heappop(running)
        held -= 1
        free_threads += 1
        if held == 0:
            holder = None
    return now


def main():
    tests = read(sys.argv[1])
    threads = [int(t) for t in sys.argv[2:]] or [2, 256]
    print(f"{len(tests)} tests, turns summed {sum(s for _, _, s in tests):.0f} s")
    for t in threads:
        fifo, batch = simulate(tests, t, "fifo"), simulate(tests, t, "batch")
        print(f"{t:4d} threads: fifo {fifo:.0f} s, batch {batch:.0f} s")


if __name__ == "__main__":
    main()
