"""Failure reasons a person can read: what the status tracker keeps of the text an event carries.

The event itself (``/v1/events``) and the journal keep the whole text; snapshots carry this cleaned one.

What a witness generator prints when it fails is mostly not the message: node's report of an uncaught error
starts with the file and line that threw, the source line and a caret under it, then the message, then the
stack frames (``    at fn (file:line:col)``) and node's version; snarkjs adds colour codes. The message
lines (which signal, which input, which template and line) are what a person needs, so
:func:`readable_reason` keeps those and drops the rest. Python tracebacks are treated the same way.
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
# A place in a source file: "/srv/x.js:12", "file:///x.mjs:3:9", "node:internal/process/promises:288",
# "C:\x\y.js:4:2", "./lib/x.js:7" (a path with a slash, or node's own modules, then a line number).
_PLACE = r"(?:file://)?(?:[A-Za-z]:)?(?:[^\s:()]*[\\/][^\s:()]*|node:[^\s:()]+):\d+(?::\d+)?"
# A stack frame: node's "    at fn (file:line:col)", "at file:line:col", "at Array.forEach (<anonymous>)";
# indented, or ending in a place or one of node's "(<anonymous>)", "(native)", "(index 0)".
_STACK_FRAME = re.compile(
    rf"\s+at\s|at\s.*(?:\((?:.*{_PLACE}|<anonymous>|native|index \d+)\)|\s{_PLACE})\s*$"
)
# The head of node's report of an uncaught error: the place that threw, alone at the end of a line (what
# comes before it, the caller's own prefix, is kept); the source line and a caret line follow it.
_THROWN_AT = re.compile(rf"(.*?)\s*(?<![^\s])({_PLACE})\s*$")
_CARET = re.compile(r"\s*\^+\s*$")
_NODE_VERSION = re.compile(r"Node\.js v\d+(?:\.\d+)*\s*$")
# Python: "Traceback (most recent call last):", then '  File "x.py", line 3, in f' and its source line.
_PY_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*$")
_PY_FRAME = re.compile(r'\s+File ".*", line \d+')
# circom's "Error in template Mul_0 line: 7" goes on with the message before it ("Assert Failed.").
_CONTINUES = re.compile(r"Error in template \S+ line: \d+")


def readable_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """A failure reason a person can read: no terminal escapes or control characters, no stack traces.

    Keeps the message lines (blank lines dropped, runs of spaces collapsed) up to ``limit`` characters and
    drops what only says where the error was thrown: stack frames (node's ``    at ...``, Python's
    ``File "...", line N``), node's place, source line and caret before the message, and its version line
    after it. A caller's prefix before node's place ("witness generation failed: /x.js:174") is joined to
    the message that follows, and circom's "Error in template T line: N" to the line before it, so the
    first line says what failed and where in the circuit. When anything was dropped or cut, the text ends
    with :data:`ELLIPSIS`; a text of nothing but frames keeps its first one (it still says where).
    """
    if len(text) <= limit and text.isprintable() and text == text.strip():
        return text  # the common case: a short plain line
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    text = _CONTROL.sub("", text)
    lines = [line for line in text.split("\n") if line.strip()]
    kept, dropped = _message_lines(lines)
    if not kept:  # nothing but frames: the first one still says where
        kept = [" ".join(lines[0].split())] if lines else []
    out = "\n".join(kept)
    cut = dropped > 0
    if len(out) > limit:
        out, cut = out[: limit - len(ELLIPSIS)].rstrip(), True
    return out + ELLIPSIS if cut else out


def _message_lines(lines: list[str]) -> tuple[list[str], int]:
    """The message lines of ``lines`` (none blank), with single spaces, and how many lines were dropped."""
    kept: list[str] = []
    dropped = 0
    joined = False  # the last kept line is a prefix the next message line goes on from
    i = 0
    while i < len(lines):
        line = lines[i]
        skip = _skipped_after(lines, i)
        if skip is None:
            thrown = _THROWN_AT.match(line)
            if thrown is not None and _CARET.match(lines[i + 2] if i + 2 < len(lines) else ""):
                prefix = " ".join(thrown.group(1).split())
                dropped += 3 if not prefix else 2
                if prefix:
                    kept.append(prefix)
                    joined = True
                i += 3
                continue
            words = " ".join(line.split())
            if kept and (joined or _CONTINUES.match(words)):
                kept[-1] = f"{kept[-1]} {words}"
            else:
                kept.append(words)
            joined = False
            i += 1
        else:
            dropped += skip
            i += skip
    return kept, dropped


def _skipped_after(lines: list[str], i: int) -> int | None:
    """How many lines from ``lines[i]`` on are a frame (with its source line), a caret, a traceback head
    or node's version line; None when ``lines[i]`` is part of the message."""
    line = lines[i]
    if _PY_FRAME.match(line):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        source = following[:1].isspace() and not _PY_FRAME.match(following)
        return 2 if source else 1
    if (
        _STACK_FRAME.match(line)
        or _CARET.match(line)
        or _NODE_VERSION.match(line)
        or _PY_TRACEBACK.match(line)
    ):
        return 1
    return None
