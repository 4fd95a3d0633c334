"""Messages between the daemon and its workers (``devices.frames``): whatever ``Connection.send`` carried
comes back equal, arrays with their dtype, shape and order and writable, through a real pipe between two
processes; a frame that does not add up is an ``OSError``, as a closed pipe is."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest

from prooflane.devices import frames


def _echo(conn: Connection) -> None:
    while True:
        try:
            message = frames.receive(conn)
        except (EOFError, OSError):
            return
        frames.send(conn, ("ok", message, [a.flags.writeable for a in message[1]]))


def test_a_message_with_arrays_comes_back_equal_through_another_process() -> None:
    rng = np.random.default_rng(7)
    arrays: list[np.ndarray[Any, Any]] = [
        rng.integers(0, 2**63, size=(62_500, 4), dtype=np.uint64),  # a partition's vector
        np.asfortranarray(rng.integers(0, 9, size=(3, 5), dtype=np.int32)),
        rng.integers(0, 9, size=(8, 8), dtype=np.int64)[::2],  # not contiguous: in the pickle
        np.zeros((0, 4), dtype=np.uint64),
    ]
    message = ("stage", arrays, {"key": "k.zkey", "point": (2**255 - 19, 3)}, b"raw", "label")
    ctx = multiprocessing.get_context("forkserver")
    parent, child = ctx.Pipe(duplex=True)
    process = ctx.Process(target=_echo, args=(child,), daemon=True)
    process.start()
    try:
        for _ in range(2):  # the connection stays in step from one message to the next
            frames.send(parent, message)
            status, back, writable = frames.receive(parent)
            assert status == "ok" and writable == [True] * len(arrays)
            assert back[0] == "stage" and back[2:] == message[2:]
            got_arrays: list[np.ndarray[Any, Any]] = back[1]
            for got, sent in zip(got_arrays, arrays, strict=True):
                assert got.dtype == sent.dtype and got.shape == sent.shape
                assert np.array_equal(got, sent)
                assert got.flags.f_contiguous == sent.flags.f_contiguous
    finally:
        parent.close()
        process.join(10)


def test_a_frame_whose_buffer_is_not_the_size_announced_is_an_os_error() -> None:
    a, b = multiprocessing.Pipe()
    a.send_bytes(pickle.dumps((pickle.dumps("x"), [16])))
    a.send_bytes(b"12345678")  # 8 bytes where 16 were announced
    with pytest.raises(OSError, match="16 bytes announced"):
        frames.receive(b)
    a.send_bytes(pickle.dumps((pickle.dumps("x"), [4])))
    a.send_bytes(b"12345678")  # more than announced
    with pytest.raises(OSError, match="4 bytes announced"):
        frames.receive(b)


def test_a_closed_pipe_is_end_of_file() -> None:
    a, b = multiprocessing.Pipe()
    a.close()
    with pytest.raises(EOFError):
        frames.receive(b)
