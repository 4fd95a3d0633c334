"""The Groth16 core's exceptions: one small hierarchy that imports nothing outside ``groth16``.

``prooflane.errors`` re-exports these classes and places ``Groth16Error`` under ``ProoflaneError``, so
inside prooflane ``except ProoflaneError`` catches them too; used on its own, the core raises the same
classes with ``Exception`` above ``Groth16Error``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FormatError", "Groth16Error", "InvalidWitnessError", "KeyMismatchError"]


class Groth16Error(Exception):
    """Raised when the Groth16 core cannot do what was asked; the base of its errors."""

    __slots__ = ()  # no instance layout of its own, so an application may give it a base class of its own


class FormatError(Groth16Error):
    """Raised when a file is not in the format it should be in (bad magic, truncated section, bad field)."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self) -> tuple[type[FormatError], tuple[str, str]]:
        # Rebuilt from its two fields when it crosses a process boundary (pickle calls __init__ with args).
        return type(self), (self.path, self.problem)


class InvalidWitnessError(Groth16Error):
    """Raised when a witness does not fit a circuit: wrong length or curve, or an unsatisfied constraint."""


class KeyMismatchError(Groth16Error):
    """Raised when a key, a circuit, a witness or a proof belong to different curves or circuits."""
