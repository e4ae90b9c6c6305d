"""A pyarrow ``Dataset`` view of a table, so engines that push projection and
filters into pyarrow datasets (DuckDB, Polars' ``scan_pyarrow_dataset``) read
only the columns and rows they need from Tessera."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as pads


class TesseraDataset(pads.Dataset):
    """Read-only dataset over one version of a table.

    ``scanner(columns=..., filter=...)`` runs a Tessera scan with that
    projection and filter; ``last_scan`` keeps the last scan's statistics."""

    def __init__(self, table) -> None:  # noqa: D107 - pyarrow's base has no Python __init__ to call
        self._table = table
        self.last_scan = None

    @property
    def schema(self) -> pa.Schema:
        return self._table.schema

    def scanner(self, columns=None, filter=None, batch_size=None, **_ignored) -> pads.Scanner:
        if isinstance(columns, dict):
            raise NotImplementedError("projections with expressions are not supported; pass column names")
        scan = self._table.scanner(columns=list(columns) if columns is not None else None, filter=filter,
                                   batch_size=batch_size or 64 * 1024)
        self.last_scan = scan
        return pads.Scanner.from_batches(scan.reader())

    def to_table(self, columns=None, filter=None, **kw) -> pa.Table:
        return self.scanner(columns=columns, filter=filter, **kw).to_table()

    def to_batches(self, columns=None, filter=None, **kw):
        return self.scanner(columns=columns, filter=filter, **kw).to_batches()

    def count_rows(self, filter=None, **_ignored) -> int:
        return self._table.count_rows(filter)

    def head(self, num_rows: int, columns=None, filter=None, **_ignored) -> pa.Table:
        return self._table.to_arrow(columns=columns, filter=filter, limit=num_rows)
