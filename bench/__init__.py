"""Benchmarks and test rigs, not part of the installed daemon.

``make bench`` runs ``python -m bench``.
"""
