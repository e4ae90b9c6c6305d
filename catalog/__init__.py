"""Tessera's user-facing layer: tables (and, later, the catalog, CLI and Spark source)."""

from .table import Table

__all__ = ["Table"]
