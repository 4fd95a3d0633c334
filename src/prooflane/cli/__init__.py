"""The ``prooflane`` command line: ``serve``, ``submit``, ``status``, ``bench``, ``demo``, ``circuits``,
``setup``, ``prove``, ``verify``, ``sector``, ``fleet`` and ``service``, one module per group of commands.

May import every part below it, through their faces and public modules; the proving commands import only
``groth16`` (they are timed as whole processes). See docs/architecture.md.
"""

from .entry import main

__all__ = ["main"]
