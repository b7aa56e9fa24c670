#!/usr/bin/env python3
"""The e2e binary's wall time, simulated from a turn log (KILN_TEST_TURNS=FILE).

Each line of the log is "seconds kind test": how long the test held its turn. libtest starts
tests in name order on THREADS threads; a started test waits for its turn
(crates/kiln/tests/e2e/common): `alone` tests one at a time, a module's group two at a time,
`beside` tests four at a time, and never two kinds at once. Two rules for who goes next:

- fifo: the turns before 084135f. A test of another kind waiting stops the kind holding the
  machine from taking more; the machine goes to the first test that waits.
- batch: the turns from 084135f. The kind holding the machine takes more up to its limit;
  when it is free it goes to the kind with the most tests waiting.
- longest: the turns since. As batch, and of a kind's tests waiting the longest goes first
  (each test's time as the turn log has it; the harness reads earlier runs' from
  crates/kiln/tests/e2e/turns.txt).

It gave the five fresh-clone runs of e539562 (libtest's two threads, fifo) within a second of
their measured times. Usage: scripts/turns_sim.py TURNS_FILE [THREADS...]

scripts/turns_sim.py --expected TURNS_FILE... writes crates/kiln/tests/e2e/turns.txt: each
test's mean turn over the logs, for the harness to start the longest first.
"""

import collections
import heapq
import os
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
            best = next_kind(waiting) if rule != "fifo" and waiting else None
            order = sorted(waiting, key=lambda t: -t[2]) if rule == "longest" else waiting
            for test in order:
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


HEADER = """\
# How long each end-to-end test held its turn on the machine (seconds, as KILN_TEST_TURNS
# writes them: the mean over the turn logs of fresh-clone runs beside the noisy neighbour).
# The turns (common::take_turn) start the longest of a kind first; a test missing here goes
# last. Regenerate with scripts/turns_sim.py --expected LOG...; a stale figure costs only time.
"""


def write_expected(logs):
    """Each test's mean turn over `logs`, as the harness reads them."""
    seen = collections.defaultdict(list)
    kinds = {}
    for log in logs:
        for name, kind, seconds in read(log):
            seen[name].append(seconds)
            kinds[name] = kind
    path = os.path.join(os.path.dirname(__file__), "../crates/kiln/tests/e2e/turns.txt")
    with open(path, "w") as f:
        f.write(HEADER)
        for name in sorted(seen):
            f.write(f"{sum(seen[name]) / len(seen[name]):.1f} {kinds[name]} {name}\n")
    print(f"{len(seen)} tests from {len(logs)} logs: {os.path.normpath(path)}")


def main():
    if sys.argv[1] == "--expected":
        write_expected(sys.argv[2:])
        return
    tests = read(sys.argv[1])
    threads = [int(t) for t in sys.argv[2:]] or [2, 256]
    print(f"{len(tests)} tests, turns summed {sum(s for _, _, s in tests):.0f} s")
    for t in threads:
        runs = {rule: simulate(tests, t, rule) for rule in ["fifo", "batch", "longest"]}
        print(f"{t:4d} threads: " + ", ".join(f"{r} {s:.0f} s" for r, s in runs.items()))


if __name__ == "__main__":
    main()
