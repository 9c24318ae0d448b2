"""Log output: the text lines launchers already read, or one JSON object per line.

Both formats carry the same facts: time, level, instance name and the message
(``event`` in JSON). JSON adds, where a line has them, the upstream connection
id, the stream id and the cause (the RFC 9209 error type of a failed request,
``connection_refused`` say), as fields a log pipeline can filter on. They come
from ``extra={"conn": ..., "stream": ..., "cause": ...}`` when the caller passes
them; otherwise ``conn=N`` and ``stream=N`` are read from the message, which is
how the rest of h2ping writes them (``conn=0``, no connection, is left out).
Nothing is guessed beyond that.
"""

from __future__ import annotations

import logging
import re
import sys

from .config import Config

#: The logger for start and stop lines (listening, draining, the summary): they are
#: written at every -log-level, so that any log shows the proxy ran and how it ended.
LIFECYCLE = "h2ping.lifecycle"
#: -log-headers' lines (h2ping.forward.headerlog), written at every -log-level too.
HEADERS = "h2ping.headers"

# Ids start at 1; "conn=0" is how a request that reached no connection is logged.
_CONN = re.compile(r"\bconn=([1-9][0-9]*)\b")
_STREAM = re.compile(r"\bstream=([1-9][0-9]*)\b")


def plural(count: int, noun: str) -> str:
    """``1 request``, ``2 requests``: a count for a log line (regular plurals only)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in values are escaped)."""

    def __init__(self, instance: str) -> None:
        super().__init__()
        self.instance = instance

    def format(self, record: logging.LogRecord) -> str:
        # Here, not at the top: a process logging text never loads them (~0.4 MB).
        import datetime
        import json

        event = record.getMessage()
        created = datetime.datetime.fromtimestamp(record.created).astimezone()
        out: dict[str, object] = {
            "time": created.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "instance": self.instance,
            "event": event,
        }
        for key, pattern in (("conn", _CONN), ("stream", _STREAM)):
            value = getattr(record, key, None)
            if value is None and (match := pattern.search(event)):
                value = int(match.group(1))
            if value is not None:
                out[key] = value
        cause = getattr(record, "cause", None)
        if cause is not None:
            out["cause"] = str(cause)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def text_formatter(instance: str) -> logging.Formatter:
    # A "%" in the name must not be read as a format directive.
    safe = instance.replace("%", "%%")
    return logging.Formatter(f"%(asctime)s %(levelname)s h2ping {safe}: %(message)s")


def setup_logging(config: Config) -> None:
    """Send the ``h2ping`` loggers to stderr in ``config.log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    name = config.instance_name
    json_lines = config.log_format == "json"
    handler.setFormatter(JsonFormatter(name) if json_lines else text_formatter(name))
    root = logging.getLogger("h2ping")
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    root.propagate = False
    logging.getLogger(LIFECYCLE).setLevel(logging.INFO)
    logging.getLogger(HEADERS).setLevel(logging.INFO)  # -log-headers asked for them
