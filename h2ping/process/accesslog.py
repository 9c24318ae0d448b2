"""``-access-log``: one line per finished request, written by a thread of its own.

The event loop only puts a tuple of numbers and short byte strings on a bounded
queue; the writer thread formats the lines and writes them. When the disk is
slower than requests finish and the queue fills up, further lines are dropped and
counted (``access_log_dropped_total``): the proxy never waits for the disk and
never buffers without bound. A write that fails (a full disk) drops its lines the
same way, with one warning until writing works again.

Each batch of whole lines goes out in one ``write`` on a descriptor opened with
``O_APPEND``, so the workers of ``-workers N`` can share one file without cutting
into each other's lines. :meth:`AccessLog.reopen` (SIGHUP) opens the path again
before the next line, for log rotation.

A line holds the method, the path without its query, sizes, times and ids: never
a header value, a query string or a body, as in every other log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import queue
import threading
import time
from typing import cast

from ..forward.accounting import LogEntry
from ..http1.messages import loggable_target
from ..stats import Stats

log = logging.getLogger("h2ping.accesslog")

#: Lines waiting for the writer at most: about 8 MB of entries, seconds of traffic.
QUEUE_LINES = 16384
#: Lines the writer takes off the queue for one write.
BATCH_LINES = 1024
#: A path is logged up to this many bytes (the rest is cut, and ends with "...").
MAX_PATH_BYTES = 1024

#: One finished request (see the accounting's LogEntry).
Entry = LogEntry

_WAKE = object()  # put on the queue so that the writer looks at its flags
_STOP = object()


def path_of(target: bytes) -> str:
    """The request target without its query, fragment or userinfo, for a log line."""
    path = loggable_target(target)
    if len(path) > MAX_PATH_BYTES:
        path = path[:MAX_PATH_BYTES] + b"..."
    return path.decode("latin-1")


def quoted(value: bytes) -> str:
    """``value`` for inside double quotes, as nginx's ``escape=default`` writes
    it: ``"`` and ``\\`` behind a backslash, every byte outside printable
    ASCII as ``\\xHH``, so a line stays one line of plain text."""
    return "".join(_QUOTED[byte] for byte in value)


_QUOTED = [
    "\\" + chr(b) if chr(b) in '"\\' else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}"
    for b in range(256)
]


def format_entry(entry: Entry, log_format: str, instance: str) -> str:
    """One line, without its newline, in ``text`` or ``json``."""
    when, method, target, status, bytes_in, bytes_out, duration, headers = entry[:8]
    conn, stream, replays, outcome = entry[8:]
    stamp = datetime.datetime.fromtimestamp(when).astimezone().isoformat(timespec="milliseconds")
    path = path_of(target)
    if log_format == "json":
        return json.dumps(
            {
                "time": stamp,
                "instance": instance,
                "method": method.decode("latin-1"),
                "path": path,
                "status": status or None,
                "request_bytes": bytes_in,
                "response_bytes": bytes_out,
                "duration": round(duration, 6),
                "time_to_headers": None if headers is None else round(headers, 6),
                "conn": conn or None,
                "stream": stream or None,
                "replays": replays,
                "outcome": outcome,
            }
        )
    # The instance name and the path are quoted, so that a line splits one way
    # whatever they hold (a -name with a space); the method is a token.
    return (
        f'{stamp} "{quoted(instance.encode())}" {method.decode("latin-1")}'
        f' "{quoted(path.encode("latin-1"))}"'
        f" status={status or '-'} request_bytes={bytes_in} response_bytes={bytes_out}"
        f" duration={duration:.6f}"
        f" time_to_headers={'-' if headers is None else f'{headers:.6f}'}"
        f" conn={conn or '-'} stream={stream or '-'} replays={replays} outcome={outcome}"
    )


class AccessLog:
    """The writer of one proxy's access log: :meth:`open`, :meth:`write` per
    finished request, :meth:`close` at the end."""

    def __init__(self, path: str, log_format: str, instance: str, stats: Stats) -> None:
        self.path = path  # "-": standard error
        self._format = log_format
        self._instance = instance
        self._stats = stats
        self._queue: queue.Queue[object] = queue.Queue(QUEUE_LINES)
        self._fd = -1
        self._reopen = False
        self._failing = False  # the last write failed: warned once
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Open the file (raises ``OSError``) and start the writer."""
        self._loop = asyncio.get_running_loop()
        self._fd = self._open_fd()
        self._thread = threading.Thread(target=self._run, name="h2ping-access-log", daemon=True)
        self._thread.start()

    def write(self, entry: Entry) -> None:
        """Queue one line; dropped and counted if the writer is that far behind."""
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self._stats.access_log_lines_dropped(1)

    def reopen(self) -> None:
        """Open the path again before the next line (after the file was rotated)."""
        if self.path != "-":
            self._reopen = True
            with contextlib.suppress(queue.Full):  # a full queue wakes it anyway
                self._queue.put_nowait(_WAKE)

    async def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (for up to ``timeout`` seconds), then close the file."""
        thread = self._thread
        if thread is None:
            return
        self._thread = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # the stop must not be dropped: wait for room
            try:
                self._queue.put_nowait(_STOP)
                break
            except queue.Full:
                await asyncio.sleep(0.01)
        # A writer stuck on a dead disk stays behind (a daemon thread): never waited for.
        while thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    # ----------------------------------------------------------------- writer thread

    def _open_fd(self) -> int:
        if self.path == "-":
            return os.dup(2)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        return os.open(self.path, flags, 0o644)

    def _run(self) -> None:
        try:
            stop = False
            while not stop:
                batch = [self._queue.get()]
                while len(batch) < BATCH_LINES:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self._reopen:
                    self._reopen_fd()
                lines = []
                for item in batch:
                    if item is _STOP:
                        stop = True
                    elif item is not _WAKE:
                        entry = cast(Entry, item)
                        lines.append(format_entry(entry, self._format, self._instance))
                if lines:
                    self._write_lines(lines)
        finally:
            os.close(self._fd)

    def _reopen_fd(self) -> None:
        self._reopen = False
        try:
            fd = self._open_fd()
        except OSError as exc:  # keep writing where it was: better than nowhere
            log.warning("access log %s: cannot reopen: %s", self.path, exc.strerror or exc)
            return
        os.close(self._fd)
        self._fd = fd

    def _write_lines(self, lines: list[str]) -> None:
        data = memoryview(("\n".join(lines) + "\n").encode("utf-8", "replace"))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            lost = data.tobytes().count(b"\n")
            self._lost(lost)
            if not self._failing:
                self._failing = True
                log.warning(
                    "access log %s: write failed: %s; lines are dropped until it works",
                    self.path,
                    exc.strerror or exc,
                )
            return
        if self._failing:
            self._failing = False
            log.warning("access log %s: writing again", self.path)

    def _lost(self, lines: int) -> None:
        """Count lines lost in the writer: on the event loop, which owns the stats."""
        loop = self._loop
        if loop is not None and lines:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody counts
                loop.call_soon_threadsafe(self._count_lost, lines)

    def _count_lost(self, lines: int) -> None:
        self._stats.access_log_lines_dropped(lines)
