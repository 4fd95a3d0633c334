"""The engine's log: one line per job accepted, resumed, done, failed or cancelled, per worker death,
restart and loss, per health change; the text and JSON formats (docs/operations.md, "Logs").

The real engine on the in-process backend (tests/support/engine.py), its records read with caplog.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.devices import InProcessBackend, Step
from prooflane.engine.engine import Engine
from prooflane.logs import JsonFormatter, TextFormatter, configure_logging, one_line
from prooflane.states import JobState
from prooflane.status import readable_reason
from tests.support.clock import ManualClock
from tests.support.engine import WAIT, Gate, Harness, Unstartable, is_synthesis, running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

JOB_ID = "ps-snap-update-3644168-33825"  # ids as operators choose them: long, never cut
# What a witness generator prints when it fails: colour codes, the message, stack frames.
GENERATOR_OUTPUT = (
    "\x1b[31mError: Assert Failed.\x1b[0m\n"
    "Error in template Num2Bits_3 line: 38\n"
    "    at main (/srv/circuits/gen.js:174:27)\n"
    "    at Module._compile (node:internal/modules/cjs/loader:1105:14)\n"
)


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record of prooflane's loggers, DEBUG and up."""
    caplog.set_level(logging.DEBUG, logger="prooflane")
    return caplog


def lines(caplog: pytest.LogCaptureFixture, logger: str, pattern: str = "") -> list[logging.LogRecord]:
    """The records of ``logger`` whose message matches ``pattern`` (a regular expression)."""
    return [r for r in caplog.records if r.name == logger and re.search(pattern, r.getMessage())]


def one(caplog: pytest.LogCaptureFixture, logger: str, pattern: str) -> logging.LogRecord:
    found = lines(caplog, logger, pattern)
    assert len(found) == 1, [r.getMessage() for r in lines(caplog, logger)]
    return found[0]


class LineWatch(logging.Handler):
    """Sets ``seen`` when a record of ``logger`` whose message matches ``pattern`` is written (records are
    written on the event loop, so the event may be set there)."""

    def __init__(self, logger: str, pattern: str) -> None:
        super().__init__(logging.DEBUG)
        self.logger, self.pattern = logger, re.compile(pattern)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == self.logger and self.pattern.search(record.getMessage()):
            self.seen.set()

    async def wait(self) -> None:
        async with asyncio.timeout(WAIT):
            await self.seen.wait()


@pytest.fixture
def watch(logged: pytest.LogCaptureFixture) -> Iterator[Callable[[str, str], LineWatch]]:
    """``watch(logger, pattern)``: a LineWatch on prooflane's records until the test ends."""
    watches: list[LineWatch] = []

    def start(logger: str, pattern: str) -> LineWatch:
        watches.append(LineWatch(logger, pattern))
        logging.getLogger("prooflane").addHandler(watches[-1])
        return watches[-1]

    yield start
    for line_watch in watches:
        logging.getLogger("prooflane").removeHandler(line_watch)


def _kill(h: Harness) -> Callable[[Step], None]:
    def kill(step: Step) -> None:
        assert step.worker_id is not None
        h.backend.kill(step.worker_id, "killed by the test")

    return kill


# -- jobs -----------------------------------------------------------------------------------------------


async def test_an_accepted_job_and_its_end_are_one_line_each_with_the_full_id_and_kind(
    h: Harness, logged: pytest.LogCaptureFixture
) -> None:
    job_id = await h.submit("window-post", job_id=JOB_ID)
    assert await h.done(job_id) is JobState.DONE
    accepted = one(logged, "prooflane.engine", "accepted")
    assert accepted.getMessage() == f"job {JOB_ID} (window-post, 1 partition) accepted"
    assert accepted.levelno == logging.INFO
    done = one(logged, "prooflane.engine", " done in ")
    assert done.getMessage().startswith(f"job {JOB_ID} (window-post, 1 partition) done in ")
    assert done.levelno == logging.INFO
    assert (done.job_id, done.kind, done.state, done.partitions) == (JOB_ID, "window-post", "done", 1)  # type: ignore[attr-defined]
    assert not lines(logged, "prooflane.engine", "failed|cancelled|resumed")


async def test_a_failed_job_is_one_warning_with_the_cleaned_reason_and_the_partition(
    h: Harness, logged: pytest.LogCaptureFixture
) -> None:
    def generator_fails(step: Step) -> None:
        raise RuntimeError(GENERATOR_OUTPUT)

    h.gate.act(is_synthesis, generator_fails)
    job_id = await h.submit("winning-post", job_id=JOB_ID)
    assert await h.done(job_id) is JobState.FAILED
    failed = one(logged, "prooflane.engine", "failed after")
    assert failed.levelno == logging.WARNING
    text = failed.getMessage()
    assert text.startswith(f"job {JOB_ID} (winning-post, 1 partition) failed after ")
    # The same cleaning as the status view's, on one line: no colour codes, no stack frames.
    view = h.engine.job(job_id)
    assert view is not None and view.error is not None
    shown = next(p for p in h.engine.snapshot().pipelines if p.job_id == job_id)
    assert shown.reason == readable_reason(view.error)
    assert failed.reason == one_line(readable_reason(view.error))  # type: ignore[attr-defined]
    assert text.endswith(": " + failed.reason)  # type: ignore[attr-defined]
    assert "partition 0 failed: synthesis failed: Error: Assert Failed." in text
    assert "\x1b" not in text and "gen.js" not in text and "\n" not in text
    assert failed.partition == 0 and failed.state == "failed"  # type: ignore[attr-defined]
    # The whole text, frames and all, at DEBUG only.
    whole = one(logged, "prooflane.engine", "the whole failure reason")
    assert whole.levelno == logging.DEBUG and GENERATOR_OUTPUT in whole.getMessage()
    assert not lines(logged, "prooflane.engine", " done in ")


async def test_a_cancelled_job_is_one_line_saying_why(h: Harness, logged: pytest.LogCaptureFixture) -> None:
    held = h.gate.hold(is_synthesis)
    job_id = await h.submit("porep-c2", job_id=JOB_ID)
    await held.reached.wait()
    assert await h.engine.cancel(job_id)
    held.release.set()
    cancelled = one(logged, "prooflane.engine", "cancelled")
    assert cancelled.levelno == logging.INFO
    text = cancelled.getMessage()
    assert text.startswith(f"job {JOB_ID} (porep-c2, 10 partitions) cancelled after ")
    assert text.endswith(": cancelled by request (0 of 10 proven)")
    assert cancelled.reason == "cancelled by request"  # type: ignore[attr-defined]


async def test_a_restart_says_which_jobs_it_resumed_and_how_far_they_were(
    engine_config: Callable[..., Config], logged: pytest.LogCaptureFixture
) -> None:
    config = engine_config()
    async with running(config) as h:
        job_id = await h.submit("porep-c2", job_id=JOB_ID)
        held = h.gate.hold(lambda s: s.name == "prove_start" and s.label == f"{job_id}/1")
        await held.reached.wait()  # partition 0 is proven and journalled; 1 waits in the device section
    logged.clear()
    async with running(config) as h:
        resumed = one(logged, "prooflane.engine", "resumed from the journal:")
        assert resumed.getMessage() == (
            f"job {JOB_ID} (porep-c2, 10 partitions) resumed from the journal: 1 of 10 proven already"
        )
        assert resumed.levelno == logging.INFO and resumed.resumed and resumed.proven == 1  # type: ignore[attr-defined]
        summary = one(logged, "prooflane.engine", "^resumed ")
        assert summary.getMessage() == "resumed 1 unfinished job from the journal (9 partitions to prove)"
        assert not lines(logged, "prooflane.engine", "accepted")
        assert await h.done(job_id) is JobState.DONE
        one(logged, "prooflane.engine", f"^job {JOB_ID} .* done in ")


async def test_a_start_on_a_journal_with_nothing_unfinished_says_nothing_of_resuming(
    h: Harness, logged: pytest.LogCaptureFixture
) -> None:
    assert h.engine.ready
    assert not lines(logged, "prooflane.engine", "resum")


# -- workers and health ---------------------------------------------------------------------------------


async def test_a_worker_death_its_restart_and_the_health_they_cause_are_one_line_each(
    h: Harness, logged: pytest.LogCaptureFixture
) -> None:
    h.gate.act(lambda s: s.name == "prove_start", _kill(h))
    job_id = await h.submit("winning-post")
    assert await h.done(job_id) is JobState.DONE
    died = one(logged, "prooflane.engine", "died")
    assert died.levelno == logging.WARNING
    assert died.getMessage() == (
        "worker cpu:0/w0 died: killed by the test; the partition it held goes back to the queue"
    )
    assert (died.worker_id, died.reason, died.partitions) == ("cpu:0/w0", "killed by the test", 1)  # type: ignore[attr-defined]
    restarted = one(logged, "prooflane.engine", "restarted")
    assert restarted.levelno == logging.INFO
    assert restarted.getMessage().startswith("worker cpu:0/w0 restarted: its replacement answers, ")
    bad = one(logged, "prooflane.health", "not ok:")
    assert bad.levelno == logging.ERROR
    assert bad.getMessage().startswith("health not ok: device cpu:0 has no live worker (cpu:0/w0")
    assert bad.ok is False and bad.devices_down == ["cpu:0"]  # type: ignore[attr-defined]
    good = one(logged, "prooflane.health", "ok again")
    assert good.levelno == logging.INFO and good.ok is True  # type: ignore[attr-defined]
    order = [died, bad, restarted, good]
    assert sorted(order, key=logged.records.index) == order
    assert len(lines(logged, "prooflane.health")) == 2


async def test_a_worker_that_cannot_come_back_is_one_lost_line_and_health_goes_bad_once(
    engine_config: Callable[..., Config],
    logged: pytest.LogCaptureFixture,
    watch: Callable[[str, str], LineWatch],
) -> None:
    backend = Unstartable()
    async with Engine(engine_config(), backend=backend) as engine:
        one(logged, "prooflane.engine", "^worker cpu:0/w0 started in ")
        lost_line = watch("prooflane.engine", "lost")
        backend.kill("cpu:0/w0", "killed by the test")
        await lost_line.wait()
        assert not engine.health().ok
    lost = one(logged, "prooflane.engine", "lost")
    assert lost.levelno == logging.ERROR
    assert lost.getMessage() == (
        "worker cpu:0/w0 lost: it could not be started 3 times in a row (last: worker cpu:0/w0 is dead: "
        "cannot start: no processes left); device cpu:0 is tried again, less and less often"
    )
    one(logged, "prooflane.engine", "^worker cpu:0/w0 died: killed by the test; it held no partition$")
    failed_starts = lines(logged, "prooflane.engine", "could not start")
    said = [r.getMessage().split(": ")[0] for r in failed_starts]
    assert said == [
        "worker cpu:0/w0 could not start (attempt 1)",
        "worker cpu:0/w0 could not start (attempt 2)",
    ]
    assert {r.levelno for r in failed_starts} == {logging.WARNING}
    one(logged, "prooflane.health", "^health not ok: device cpu:0 has no live worker")
    assert not lines(logged, "prooflane.health", "ok again")  # stopping is not a health change
    assert not lines(logged, "prooflane.engine", "restarted")


async def test_a_stalled_queue_is_seen_without_an_event_and_logged_once_until_it_moves(
    engine_config: Callable[..., Config],
    logged: pytest.LogCaptureFixture,
    watch: Callable[[str, str], LineWatch],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("prooflane.engine.logbook.HEALTH_CHECK_SECS", 0.02)
    clock = ManualClock()
    gate = Gate()
    held = gate.hold(is_synthesis)
    backend = InProcessBackend(gate)
    async with Engine(engine_config(stall_secs=60), backend=backend, clock=clock) as engine:
        h = Harness(engine, backend, gate)
        job_id = await h.submit("porep-c2")
        await held.reached.wait()  # synthesis hangs; nine partitions wait; the worker is free
        stalled = watch("prooflane.health", "not ok")
        clock.advance(61)  # no event: only the timer can see it
        await stalled.wait()
        bad = one(logged, "prooflane.health", "not ok")
        assert bad.getMessage().startswith("health not ok: queue stalled: 9 partitions wait")
        assert bad.levelno == logging.ERROR
        await asyncio.sleep(0.1)  # the timer looks again, several times: nothing new to say
        assert len(lines(logged, "prooflane.health")) == 1
        clock.advance(5)
        held.release.set()
        assert await h.done(job_id) is JobState.DONE
        good = one(logged, "prooflane.health", "ok again")
        assert good.getMessage() == "health ok again after 5.00 s not ok"  # on the engine's (manual) clock
    assert len(lines(logged, "prooflane.health")) == 2


# -- the two formats ------------------------------------------------------------------------------------


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """prooflane's records, DEBUG and up, as the JSON format writes them."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("prooflane")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_the_json_format_is_one_object_a_line_with_the_fields_of_each_line(
    h: Harness, json_lines: io.StringIO
) -> None:
    def generator_fails(step: Step) -> None:
        raise RuntimeError(GENERATOR_OUTPUT)

    h.gate.act(is_synthesis, generator_fails)
    job_id = await h.submit("snap-update", job_id=JOB_ID)
    assert await h.done(job_id) is JobState.FAILED
    written = json_lines.getvalue().splitlines()
    records = [json.loads(line) for line in written]  # every line parses on its own
    assert records and all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in records)
    accepted, failed, whole = (
        next(r for r in records if said in r["message"])
        for said in ("accepted", "failed after", "whole failure reason")
    )
    assert accepted == accepted | {"level": "INFO", "logger": "prooflane.engine", "job_id": JOB_ID,
                                   "kind": "snap-update", "partitions": 16, "priority": "normal",
                                   "resumed": False, "state": "queued"}  # fmt: skip
    assert accepted["message"] == f"job {JOB_ID} (snap-update, 16 partitions) accepted"
    assert failed["level"] == "WARNING" and failed["state"] == "failed" and failed["partition"] == 0
    assert failed["job_id"] == JOB_ID and failed["kind"] == "snap-update"
    assert "\x1b" not in failed["reason"] and "gen.js" not in failed["reason"]
    assert failed["message"].endswith(failed["reason"])
    assert whole["level"] == "DEBUG" and GENERATOR_OUTPUT in whole["reason"]


def _record(message: str, level: int = logging.INFO, **fields: object) -> logging.LogRecord:
    record = logging.getLogger("prooflane.engine").makeRecord(
        "prooflane.engine", level, __file__, 1, message, (), None, extra=fields
    )
    record.created = 1796137445.25  # 2026-12-01T15:04:05.250Z
    return record


def test_the_text_format_is_one_line_time_level_logger_message() -> None:
    text = TextFormatter().format(
        _record(f"job {JOB_ID} (snap-update, 16 partitions) accepted", job_id=JOB_ID)
    )
    assert (
        text
        == f"2026-12-01T15:04:05Z INFO prooflane.engine job {JOB_ID} (snap-update, 16 partitions) accepted"
    )
    broken = TextFormatter().format(_record("first line\n  second line\n\nthird", logging.WARNING))
    assert broken == "2026-12-01T15:04:05Z WARNING prooflane.engine first line | second line | third"


def test_the_json_format_carries_time_level_logger_message_and_fields() -> None:
    line = JsonFormatter().format(_record("worker cpu:0/w0 died: x", logging.WARNING, worker_id="cpu:0/w0"))
    assert json.loads(line) == {
        "time": "2026-12-01T15:04:05.250Z", "level": "WARNING", "logger": "prooflane.engine",
        "message": "worker cpu:0/w0 died: x", "worker_id": "cpu:0/w0",
    }  # fmt: skip
    assert "\n" not in JsonFormatter().format(_record("a\nb"))


def test_configure_logging_sends_every_logger_to_one_stream_in_the_format_asked(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("httpx").level
    out = io.StringIO()
    try:
        configure_logging("info", "json", out)
        configure_logging("info", "json", out)  # again: replaces, never doubles
        logging.getLogger("prooflane.fleet").info("daemon a unreachable", extra={"daemon": "a"})
        logging.getLogger("prooflane.engine").debug("not at info")
        logging.getLogger("httpx").info("HTTP Request: GET /status")  # one per request: left out
        [line] = out.getvalue().splitlines()
        written = json.loads(line)
        assert written.pop("time")
        assert written == {
            "level": "INFO", "logger": "prooflane.fleet", "message": "daemon a unreachable", "daemon": "a",
        }  # fmt: skip
        with pytest.raises(ValueError, match="log format 'xml'"):
            configure_logging("info", "xml", out)
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
