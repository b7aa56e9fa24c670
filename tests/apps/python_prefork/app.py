"""A WSGI app whose CPU per request is known by construction, for a pre-fork server
(gunicorn's sync workers): GET /work burns CPU_MS of the worker's own CPU time, measured by
the kernel's clock of this process (time.process_time), then answers. Nothing else runs.
"""
import os
import time

CPU_MS = float(os.environ.get("KILN_APP_CPU_MS", "8"))


def app(environ, start_response):
    if environ.get("PATH_INFO") != "/work":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no such page\n"]
    started = time.process_time()
    while time.process_time() - started < CPU_MS / 1000.0:
        pass
    body = b"worked\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
