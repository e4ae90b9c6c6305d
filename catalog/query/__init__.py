"""Tessera's query engine: a table's rows, filtered and projected.

:mod:`.predicate` turns SQL text or pyarrow Expressions into checked
Expressions (and range terms), :mod:`.pruning` meets those terms with the
table's ZONEMAP indices, :mod:`.scan` plans and reads fragments and columns
(:mod:`.stream` hands its batches out one at a time), and
:mod:`.arrow_dataset` is the scan's pyarrow ``Dataset`` face for DuckDB and
Polars.  Nothing is imported here: a scan without a filter never imports
sqlglot or Acero.
"""
