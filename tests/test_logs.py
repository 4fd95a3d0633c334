"""The daemon's log file: written beside standard error, rotated by size, its last lines read back (also
across a rotation) for ``GET /v1/logs``."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.logs import MAX_TAIL_LINES, LogFile, configure_logging, tail

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def restored() -> Iterator[None]:
    """Put the root logger back as it was (pytest's own handlers) after the test configures it."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            handler.close()
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def test_lines_go_to_the_file_and_the_stream(tmp_path: Path, restored: None) -> None:
    out = io.StringIO()
    configure_logging("info", "text", out, file=LogFile(tmp_path / "data" / "prooflane.log", 1 << 20, 2))
    logging.getLogger("prooflane.engine").info("job j1 (winning-post, 1 partition) accepted")
    logging.getLogger("prooflane.engine").info("two\nlines")
    written = (tmp_path / "data" / "prooflane.log").read_text().splitlines()
    assert written == out.getvalue().splitlines()
    assert written[0].endswith("INFO prooflane.engine job j1 (winning-post, 1 partition) accepted")
    assert written[1].endswith("two | lines")
    assert tail(tmp_path / "data" / "prooflane.log", 1) == written[-1:]


def test_the_file_rotates_and_tail_reaches_into_the_newest_rotated_one(
    tmp_path: Path, restored: None
) -> None:
    path = tmp_path / "prooflane.log"
    configure_logging("info", "text", io.StringIO(), file=LogFile(path, 4096, 2))
    log = logging.getLogger("prooflane.engine")
    for i in range(400):
        log.info("line %04d %s", i, "x" * 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "prooflane.log",
        "prooflane.log.1",
        "prooflane.log.2",
    ]
    assert path.stat().st_size <= 4096
    current = path.read_text().splitlines()
    last = tail(path, len(current) + 5)  # more than the current file holds: the rest from prooflane.log.1
    assert last[-len(current) :] == current
    assert len(last) == len(current) + 5
    assert [int(line.split()[4]) for line in last] == list(range(400 - len(last), 400))


def test_tail_of_no_file_is_nothing_and_the_count_is_bounded(tmp_path: Path) -> None:
    assert tail(tmp_path / "none.log", 10) == []
    path = tmp_path / "big.log"
    path.write_text("".join(f"{i}\n" for i in range(MAX_TAIL_LINES + 50)))
    assert len(tail(path, MAX_TAIL_LINES * 10)) == MAX_TAIL_LINES
    assert tail(path, 0) == []


def test_the_config_names_the_file_in_the_data_folder_and_can_turn_it_off(tmp_path: Path) -> None:
    assert Config(data_dir=tmp_path).log_file == tmp_path / "prooflane.log"
    assert Config(data_dir=tmp_path, log_file_bytes=0).log_file is None
    with pytest.raises(Exception, match="log_file_bytes"):
        Config(data_dir=tmp_path, log_file_bytes=100)
    with pytest.raises(Exception, match="log_file_backups"):
        Config(data_dir=tmp_path, log_file_backups=0)
