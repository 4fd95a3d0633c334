"""The daemon's and the fleet's log: one line per record on standard error, as text for people or as JSON
for log shippers.

Text: ``2026-12-01T15:04:05Z INFO prooflane.engine job ps-1 (snap-update, 16 partitions) accepted``; a
message never spans lines (a line break inside it is written as `` | ``), a traceback follows its line.
JSON: one object per line with ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the line's
structured fields (what its call passed as ``extra``: ``job_id``, ``kind``, ``worker_id``, ...) and ``exc``
(a traceback) when there is one. Every line the daemon and the fleet write is listed in docs/operations.md,
"Logs".
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "TextFormatter", "configure_logging", "one_line"]

LOG_FORMATS = ("text", "json")
"""The values of the ``log_format`` key: text for people, json (one object per line) for log shippers."""

LOG_LEVELS = ("debug", "info", "warning", "error")
"""The values of the ``log_level`` key: the least severe lines written."""

QUIET_LOGGERS = ("httpx", "httpcore")
"""Libraries that would write a line per request: only their warnings are kept."""

# The attributes every LogRecord has: whatever else a record carries came from its call's ``extra``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def one_line(text: str) -> str:
    """``text`` on one line: its non-blank lines, stripped, joined by `` | ``."""
    if "\n" not in text and "\r" not in text:
        return text
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _utc(created: float, *, millis: bool) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{stamp}.{int(created % 1 * 1000):03d}Z" if millis else f"{stamp}Z"


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER MESSAGE`` on one line (UTC, to the second); a traceback on the lines after it."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc(record.created, millis=False)} {record.levelname} {record.name} "
        line += one_line(record.getMessage())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time, level, logger, message, the record's fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _utc(record.created, millis=True),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # The fields a line was given (extra=...); not what other libraries attach to every record (Ray's
        # record factory adds "_ray_timestamp_ns"): names that start with "_" are private by convention.
        out.update(
            (k, v)
            for k, v in vars(record).items()
            if k not in _STANDARD and k not in out and not k.startswith("_")
        )
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


class _StandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when each record comes (a test runner or a wrapper may have
    replaced it since the start), never to a stream that was closed meanwhile."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always the current sys.stderr


def configure_logging(level: str = "info", log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (standard error) in
    ``log_format``; replaces the handlers of any earlier call. Once, when a daemon or the fleet starts."""
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream) if stream is not None else _StandardError()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
