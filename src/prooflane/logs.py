"""The daemon's and the fleet's log: one line per record on standard error, as text for people or as JSON
for log shippers; the daemon also writes it to ``prooflane.log`` in its data folder, rotated by size
(:func:`tail` reads its last lines back, for ``GET /v1/logs``).

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
import logging.handlers
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "LOG_FILE_NAME",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_TAIL_LINES",
    "JsonFormatter",
    "LogFile",
    "TextFormatter",
    "configure_logging",
    "one_line",
    "tail",
]

LOG_FILE_NAME = "prooflane.log"
"""The daemon's log file in its data folder; rotated copies are ``prooflane.log.1`` (the newest) and on."""

MAX_TAIL_LINES = 2000
"""The most lines :func:`tail` gives back (``GET /v1/logs?lines=``)."""
_TAIL_READ_BYTES = 4 << 20  # the most read of each file to find them

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


class LogFile:
    """Where a log file goes and when it rotates: at ``max_bytes``, keeping ``backups`` older files."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups

    def handler(self) -> logging.Handler:
        """A rotating handler on the file (its folder made if needed)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return logging.handlers.RotatingFileHandler(
            self.path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
        )


def configure_logging(
    level: str = "info", log_format: str = "text", stream: TextIO | None = None, file: LogFile | None = None
) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (standard error) in
    ``log_format``, and to ``file`` when given (rotated); replaces the handlers of any earlier call. Once,
    when a daemon or the fleet starts."""
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    console = logging.StreamHandler(stream) if stream is not None else _StandardError()
    handlers: list[logging.Handler] = [console]
    if file is not None:
        handlers.append(file.handler())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        if isinstance(old, logging.handlers.RotatingFileHandler):
            old.close()  # a log file an earlier call opened: its descriptor is not left open
    for handler in handlers:
        handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
        root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines (at most :data:`MAX_TAIL_LINES`) of the log file at ``path``, oldest first,
    reaching into the newest rotated file (``path.1``) when the current one holds fewer. A missing file
    holds none. Reads at most a few MiB of each file, from its end."""
    wanted = max(0, min(lines, MAX_TAIL_LINES))
    found: list[str] = []
    for each in (Path(path), Path(f"{path}.1")):
        if len(found) >= wanted:
            break
        found = _last_lines(each, wanted - len(found)) + found
    return found


def _last_lines(path: Path, count: int) -> list[str]:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - _TAIL_READ_BYTES)
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and text:
        text = text[1:]  # the first line read may be cut
    return text[-count:] if count else []
