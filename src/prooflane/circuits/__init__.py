"""Circuits in Python: the constraint-system builder, Poseidon and Merkle gadgets, storage-proof circuits."""
