"""The one rule for an upload's rate (:class:`~prooflane.server.upload_rate.UploadRate`), on a clock the
test moves: a grace, then windows; too slow (cut off) and slow (made room for); the server's holding back
never counted against the client."""

from __future__ import annotations

from prooflane.server.upload_rate import UploadRate

WINDOW = 10.0
MINIMUM = 100.0  # bytes a second: 1,000 a window


def test_nothing_is_judged_within_the_grace() -> None:
    rate = UploadRate(WINDOW, MINIMUM, started_at=0.0)
    assert rate.too_slow(9.9, held=False) is None and not rate.slow(9.9, held=False)
    assert rate.until_judged(4.0) == 6.0


def test_a_window_under_the_minimum_is_cut_off_naming_it() -> None:
    rate = UploadRate(WINDOW, MINIMUM, started_at=0.0)
    rate.received(999, 5.0, held=False)
    why = rate.too_slow(10.0, held=False)
    assert why == ("upload slower than 100 bytes/s (min_upload_bytes_per_sec): 999 bytes in the last 10 s")


def test_a_window_at_the_minimum_goes_on_and_windows_of_nothing_are_too_slow() -> None:
    rate = UploadRate(WINDOW, MINIMUM, started_at=0.0)
    rate.received(1000, 9.0, held=False)
    assert rate.too_slow(10.0, held=False) is None
    assert rate.too_slow(35.0, held=False) is not None  # two whole windows with nothing in them


def test_slow_averages_the_last_window_and_the_current_one() -> None:
    rate = UploadRate(WINDOW, MINIMUM, started_at=0.0)
    rate.received(1500, 1.0, held=False)
    assert not rate.slow(15.0, held=False)  # 1,500 bytes in 15 s
    assert rate.slow(19.0, held=False)  # 1,500 bytes in 19 s
    rate.received(500, 19.0, held=False)
    assert not rate.slow(19.0, held=False)


def test_a_window_the_server_held_back_is_never_held_against_the_client() -> None:
    rate = UploadRate(WINDOW, MINIMUM, started_at=0.0)
    rate.received(10, 1.0, held=True)  # the server stopped reading: its buffer is full
    assert rate.too_slow(12.0, held=True) is None
    assert rate.too_slow(45.0, held=True) is None and not rate.slow(45.0, held=True)
    assert rate.too_slow(61.0, held=False) is None  # it reads again: the window it began in is excused
    assert rate.too_slow(75.0, held=False) is not None  # a whole window since, and nothing came


def test_no_minimum_judges_nothing() -> None:
    rate = UploadRate(WINDOW, 0.0, started_at=0.0)
    assert rate.too_slow(100.0, held=False) is None and not rate.slow(100.0, held=False)
