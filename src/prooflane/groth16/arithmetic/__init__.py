"""The prover's one arithmetic seam: an interface (``base``), the C extension over a key's rows
(``extension``), the libraries over point objects (``libraries``), and the choice, made once per curve
(``choose``)."""

from .base import MAX_THREADS, NATIVE_ENV, THREADS_ENV, Arithmetic, Section, Tables, cpu_threads
from .choose import arithmetic, arithmetics, products
from .extension import NO_IFMA_ENV, SO_ENV, ExtensionArithmetic, load_extension
from .libraries import LibraryArithmetic

__all__ = [
    "MAX_THREADS",
    "NATIVE_ENV",
    "NO_IFMA_ENV",
    "SO_ENV",
    "THREADS_ENV",
    "Arithmetic",
    "ExtensionArithmetic",
    "LibraryArithmetic",
    "Section",
    "Tables",
    "arithmetic",
    "arithmetics",
    "cpu_threads",
    "load_extension",
    "products",
]
