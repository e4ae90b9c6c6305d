"""File format 2.0: one column per schema field in pre-order.

Struct and list parents own a column of their own (a struct column holds only
its length; a list column holds end offsets), followed by their children's
columns.  A packed struct (field metadata ``lance-encoding:packed``) is one
column of row-major packed values instead.  Pages are ``ArrayEncoding`` trees (package ``lance.encodings``).
"""

from __future__ import annotations

from ..schema import LanceField
from .decoder import FieldDecoder
from .encoder import FieldEncoder


def num_columns(field: LanceField) -> int:
    """Columns a top-level field occupies: one per node of its subtree (a
    packed struct takes one for itself and its children)."""
    return sum(1 for _ in field.column_nodes())


__all__ = ["FieldDecoder", "FieldEncoder", "num_columns"]
