"""Helpers shared by the benchmark scripts."""
import os, subprocess, time


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def measured(cmd):
    """Runs cmd; returns (output, cpu seconds, max rss KiB, wall s)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, ru = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd} failed:\n{out[-2000:]}")
    return out, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, time.monotonic() - start
