"""Failure reasons a person can read: what the status tracker keeps of the text an event carries.

The event itself (``/v1/events``) and the journal keep the whole text; snapshots carry this cleaned one.
"""

from __future__ import annotations

import re

__all__ = ["ELLIPSIS", "REASON_LIMIT", "readable_reason"]


REASON_LIMIT = 500
"""The most characters of a failure reason a snapshot carries (the journal keeps the whole text)."""

ELLIPSIS = " …"
"""Marks a reason that lost lines (stack frames) or characters to :func:`readable_reason`."""

# ANSI escape sequences: CSI ("ESC [ ... final", colours among them), OSC ("ESC ] ... BEL/ST") and the
# two-character ones; then C0/C1 control characters other than the newline (tabs become spaces first).
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]"
)
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_STACK_FRAME = re.compile(r"\s+at\s")  # "    at fn (file:line:col)": a Node (or similar) stack frame


def readable_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """A failure reason a person can read: no terminal escapes or control characters, no stack frames.

    Keeps the first meaningful lines (blank lines and indented ``at ...`` frames dropped, runs of spaces
    collapsed) up to ``limit`` characters; when anything was dropped or cut, the text ends with
    :data:`ELLIPSIS`.
    """
    if len(text) <= limit and text.isprintable() and text == text.strip():
        return text  # the common case: a short plain line
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    text = _CONTROL.sub("", text)
    lines = [line for line in text.split("\n") if line.strip()]
    kept = [" ".join(line.split()) for line in lines if not _STACK_FRAME.match(line)]
    if not kept:  # nothing but frames: the first one still says where
        kept = [" ".join(lines[0].split())] if lines else []
    out = "\n".join(kept)
    cut = len(kept) < len(lines)
    if len(out) > limit:
        out, cut = out[: limit - len(ELLIPSIS)].rstrip(), True
    return out + ELLIPSIS if cut else out
