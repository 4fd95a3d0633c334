"""prooflane: a pipelined Groth16 proving engine."""

__version__ = "0.1.0"

from .client import Client  # after __version__: the modules it imports may read it

__all__ = ["Client", "__version__"]
