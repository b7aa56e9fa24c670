"""Adds the calling code's stack to OpenTelemetry database spans.

OpenTelemetry's Python instrumentations (dbapi, psycopg, sqlite3, SQLAlchemy ...) record
the SQL of every call but not where in the application it came from. This span processor
takes the stack when a client span starts -- that is, inside the driver call, with the
application's frames still on the stack -- and sets:

- ``code.stacktrace``: the stack, root first, in ``traceback.format_stack`` form;
- ``code.function.name``, ``code.file.path``, ``code.line.number``: the innermost frame of
  the application's own code (not the standard library's or an installed package's).

kiln reads these to name the line of an N+1 loop and to build the DB stack trie.

Usage::

    from opentelemetry import trace
    from kiln_otel_stacks import StackSpanProcessor
    trace.get_tracer_provider().add_span_processor(StackSpanProcessor())

Add it before (or beside) the exporting processor; it only annotates spans.

Under ``opentelemetry-instrument`` nothing is to be written: installed, the package is
loaded through OpenTelemetry's ``opentelemetry_post_instrument`` entry point once the SDK
is configured, and adds itself to the tracer provider (``KILN_OTEL_STACKS=off`` leaves it
out). It keeps no state, so a pre-fork server's workers (gunicorn, uwsgi) carry it over
their fork as they carry the SDK.
"""

import os
import sys
import sysconfig
import traceback

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import SpanKind

__all__ = ["StackSpanProcessor", "install"]

_LIBRARY_DIRS = tuple(
    p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
                sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")} if p
)


# a launcher's folder: console scripts and entry points (a venv's bin/gunicorn,
# /usr/local/bin/celery, Scripts\uwsgi.exe) are the root of every stack, not the application
_LAUNCHER_DIRS = frozenset(("bin", "sbin", "Scripts"))


def _is_app_file(filename):
    if filename.startswith("<"):
        return False
    if "site-packages" in filename or "dist-packages" in filename:
        return False
    if os.path.basename(os.path.dirname(filename)) in _LAUNCHER_DIRS:
        return False
    return not filename.startswith(_LIBRARY_DIRS)


class StackSpanProcessor(SpanProcessor):
    """Sets ``code.stacktrace`` and the caller frame on spans as they start.

    kinds: the span kinds to annotate (default: CLIENT, which database spans are).
    db_only: only spans that carry ``db.system``/``db.system.name`` at start; most
        instrumentations set it at start, but not all, so the default annotates every
        span of the chosen kinds.
    max_frames: the innermost frames kept.
    """

    def __init__(self, kinds=(SpanKind.CLIENT,), db_only=False, max_frames=64):
        self._kinds = frozenset(kinds)
        self._db_only = db_only
        self._max_frames = max_frames

    def on_start(self, span, parent_context=None):
        if span.kind not in self._kinds:
            return
        if self._db_only:
            attrs = span.attributes or {}
            if "db.system" not in attrs and "db.system.name" not in attrs:
                return
        # this frame and the SDK's start_span frames are left out
        frame = sys._getframe(1)
        summary = traceback.extract_stack(frame, limit=self._max_frames)
        while summary and not _is_app_file(summary[-1].filename) and "opentelemetry" in summary[-1].filename:
            summary.pop()
        if not summary:
            return
        span.set_attribute("code.stacktrace", "".join(traceback.format_list(summary)))
        for entry in reversed(summary):
            if _is_app_file(entry.filename):
                span.set_attribute("code.function.name", entry.name)
                span.set_attribute("code.file.path", entry.filename)
                span.set_attribute("code.line.number", entry.lineno or 0)
                break

    def on_end(self, span):
        pass

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


_installed = False


def install():
    """Adds a StackSpanProcessor to the global tracer provider, once; what
    ``opentelemetry-instrument`` calls through the entry point. Does nothing without the
    SDK's provider (a no-op API provider has no processors) or with KILN_OTEL_STACKS=off."""
    global _installed
    if _installed or os.environ.get("KILN_OTEL_STACKS", "").lower() in ("off", "0", "false"):
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    add = getattr(provider, "add_span_processor", None)
    if add is None:
        return
    add(StackSpanProcessor())
    _installed = True
