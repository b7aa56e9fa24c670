"""Helpers shared by the benchmark scripts."""
import json, os, subprocess, sys, tempfile, time

# The paths every bench script uses, and its --quick flag.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
TOOLS = os.path.join(ROOT, "bench", ".tools")
KILN = os.path.join(ROOT, "target", "release", "kiln")
QUICK = "--quick" in sys.argv

# GNU time reports its child's peak RSS. wait4 from Python cannot: a child's high-water mark
# starts at the Python process's own size at fork and survives exec.
GNU_TIME = "/usr/bin/time"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def ensure_gnu_time():
    if not os.path.exists(GNU_TIME):
        sh(["apt-get", "install", "-y", "-qq", "time"])


def measured(cmd, env=None):
    """Runs cmd (in env, else this process's environment); returns (output, cpu seconds, max
    rss KiB, wall s). CPU and RSS include the processes cmd waited for (a shell pipeline's
    stages)."""
    ensure_gnu_time()
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.monotonic()
        proc = subprocess.Popen([GNU_TIME, "-f", "%U %S %M", "-o", report.name] + list(cmd),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        out = proc.stdout.read().decode("utf-8", "replace")
        code = proc.wait()
        wall = time.monotonic() - start
        if code != 0:
            raise RuntimeError(f"{cmd} failed:\n{out[-2000:]}")
        user, system, rss = report.read().split()[-3:]
    return out, float(user) + float(system), int(rss), wall


def free_port():
    """A TCP port nothing listens on now, on 127.0.0.1."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    """Returns once something accepts on 127.0.0.1:port (at most 10 s)."""
    import socket
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def write_results(prefix, results, indent=1):
    """Writes results to bench/out/<prefix>-<time>.json; returns its path."""
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=indent)
    return path


def interleaved(tools, rounds, *args):
    """Runs each of tools (name -> function of args) once a round, in turn, for rounds
    rounds (this VM's neighbours move every tool alike within a round); returns name ->
    results."""
    runs = {name: [] for name in tools}
    for _ in range(rounds):
        for name, run in tools.items():
            runs[name].append(run(*args))
    return runs
