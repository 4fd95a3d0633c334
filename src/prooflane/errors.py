"""prooflane's exceptions: one small hierarchy, each class says when it is raised."""

from __future__ import annotations

from .groth16.errors import FormatError, Groth16Error, InvalidWitnessError, KeyMismatchError

__all__ = [
    "CircuitError",
    "ConfigError",
    "Conflict",
    "DaemonError",
    "DaemonUnreachable",
    "Forbidden",
    "FormatError",
    "Groth16Error",
    "IllegalTransition",
    "Invalid",
    "InvalidWitnessError",
    "KeyMismatchError",
    "NotFound",
    "ProoflaneError",
    "Refused",
    "SectorError",
    "StorageFull",
    "TooLarge",
    "TunnelError",
    "Unavailable",
    "UnsatisfiedConstraint",
    "WorkerDied",
]


class ProoflaneError(Exception):
    """Raised when prooflane cannot do what was asked; the base of every prooflane error.

    Every subclass pickles (errors raised in a pool or worker process travel back to the daemon): one whose
    ``__init__`` takes other arguments than its message says how to rebuild itself in ``__reduce__``.
    """

    __slots__ = ()  # the layout of Exception, so that it can stand above Groth16Error (below)


# The Groth16 core has its own errors and imports nothing of prooflane's; here its base is placed under
# ProoflaneError, so that ``except ProoflaneError`` catches FormatError, InvalidWitnessError and
# KeyMismatchError wherever the core raises them, and they stay the very classes the core raises.
Groth16Error.__bases__ = (ProoflaneError,)


class CircuitError(ProoflaneError):
    """Raised when a circuit is built or used wrongly (an unknown kind or profile, a missing input)."""


class UnsatisfiedConstraint(CircuitError):
    """Raised when a witness does not satisfy a constraint; names the constraint and its index."""

    def __init__(self, name: str, index: int, detail: str = "") -> None:
        self.name = name
        self.index = index
        self.detail = detail
        message = f"constraint {index} ({name}) is not satisfied"
        super().__init__(f"{message}: {detail}" if detail else message)

    def __reduce__(self) -> tuple[type[UnsatisfiedConstraint], tuple[str, int, str]]:
        return type(self), (self.name, self.index, self.detail)


class SectorError(ProoflaneError):
    """Raised when a sector folder or file is missing, malformed, or does not fit the circuit."""


class ConfigError(ProoflaneError):
    """Raised when a configuration file or value is invalid; names the key and what is wrong."""


class Refused(ProoflaneError):
    """Raised when the engine refuses a request; ``detail`` says why, in words a person can act on.

    The engine raises one of the subclasses below and never chooses an HTTP code: the HTTP layer maps each
    subclass to one status (``prooflane.server.errors``).
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)

    def __reduce__(self) -> tuple[type[Refused], tuple[str]]:
        return type(self), (self.detail,)


class NotFound(Refused):
    """Raised when a request names a job, a proof kind or a circuit that does not exist."""


class Conflict(Refused):
    """Raised when a request clashes with what exists: a job id or circuit name taken by another request,
    or a proof asked of a job that failed or was cancelled."""


class Invalid(Refused):
    """Raised when what a request carries is wrong: a sector, a witness, a key, a priority, a state."""


class Forbidden(Refused):
    """Raised when a request names a file outside the folders this daemon may read (``allowed_roots``)."""


class TooLarge(Refused):
    """Raised when a job can never fit: one partition needs more than the whole memory budget."""


class Unavailable(Refused):
    """Raised when the engine cannot take the request now (not started, a pool process died): try again."""


class StorageFull(Refused):
    """Raised when what a request needs written cannot be (the disk of the journal or data folder is full)."""


class WorkerDied(ProoflaneError):
    """Raised when a worker process exits while it holds work; the work is retried elsewhere."""


class IllegalTransition(ProoflaneError):
    """Raised when the status tracker in strict mode gets an event its state forbids."""


class DaemonError(ProoflaneError):
    """Raised when the daemon answers a request with an error status; carries the status and its detail."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"the daemon answered {status}: {detail}")

    def __reduce__(self) -> tuple[type[DaemonError], tuple[int, str]]:
        return type(self), (self.status, self.detail)


class DaemonUnreachable(ProoflaneError):
    """Raised when no prooflane daemon answers at the given URL (not running, wrong address or port)."""


class TunnelError(ProoflaneError):
    """Raised when the fleet service cannot open an SSH tunnel to a daemon; carries ssh's own message."""
