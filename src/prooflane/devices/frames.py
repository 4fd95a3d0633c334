"""Messages between the daemon and its worker processes, with their arrays sent as they lie in memory.

``Connection.send`` pickles a message whole: a partition's vectors (8 MB at 62,500 rows: the witness, A·w,
B·w, C·w) are copied into a fresh pickle and then written, and the other end copies them out of the pickle
again. Here the message is pickled with protocol 5 and its large buffers (numpy arrays) are left out of
band: one frame carries the pickle and the buffers' sizes, then each buffer is written straight from the
array, and the receiver reads each into memory of its own (writable) that the unpickled arrays then use.
Measured with 8 MB of arrays between two processes: 0.8-1.6 ms of the sender's CPU a message, where
``Connection.send`` takes 15-16 ms (docs/engine.md, "Where the engine's extra CPU goes on SHA-256").

Both ends must use these two functions; a frame that does not add up raises ``OSError`` (the caller then
treats the process as gone, as for a closed pipe).
"""

from __future__ import annotations

import pickle
from multiprocessing import BufferTooShort
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["receive", "send"]


def send(conn: Connection, message: Any) -> None:
    """Write ``message`` to ``conn``: its pickle and sizes in one frame, then each out-of-band buffer."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raw = [b.raw() for b in buffers]
    conn.send_bytes(pickle.dumps((head, [r.nbytes for r in raw]), protocol=5))
    for r in raw:
        conn.send_bytes(r)


def receive(conn: Connection) -> Any:
    """Read one message written by :func:`send`."""
    head, sizes = pickle.loads(conn.recv_bytes())
    buffers = []
    for size in sizes:
        buffer = np.empty(size, dtype=np.uint8)  # not zeroed: the read fills it
        try:
            got = conn.recv_bytes_into(buffer)
        except BufferTooShort:
            got = -1
        if got != size:
            raise OSError(f"a message's buffer came with another size than the {size} bytes announced")
        buffers.append(buffer)
    return pickle.loads(head, buffers=buffers)
