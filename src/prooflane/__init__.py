"""prooflane: a pipelined Groth16 proving engine."""

__version__ = "0.1.0"

__all__ = ["__version__"]
