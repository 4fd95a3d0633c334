"""prooflane's exceptions: one small hierarchy, each class says when it is raised."""

from __future__ import annotations

__all__ = ["CircuitError", "ProoflaneError", "SectorError", "UnsatisfiedConstraint"]


class ProoflaneError(Exception):
    """Raised when prooflane cannot do what was asked; the base of every prooflane error."""


class CircuitError(ProoflaneError):
    """Raised when a circuit is built or used wrongly (an unknown kind or profile, a missing input)."""


class UnsatisfiedConstraint(CircuitError):
    """Raised when a witness does not satisfy a constraint; names the constraint and its index."""

    def __init__(self, name: str, index: int, detail: str = "") -> None:
        self.name = name
        self.index = index
        message = f"constraint {index} ({name}) is not satisfied"
        super().__init__(f"{message}: {detail}" if detail else message)


class SectorError(ProoflaneError):
    """Raised when a sector folder or file is missing, malformed, or does not fit the circuit."""
