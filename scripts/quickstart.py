"""Quickstart: the main job on the embedded default (local disk).

Writes a small table as Lance data files in every supported file version,
reads it back with Tessera (and with pylance when it is installed), and
prints what it did.  Usage: ``python scripts/quickstart.py [DIR]``.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import pyarrow as pa

import format as tformat


def main() -> int:
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tessera-quickstart-")
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "id": np.arange(10_000, dtype=np.int64),
            "city": pa.array(rng.choice(["SF", "NYC", "Berlin", None], 10_000)),
            "amount": rng.standard_normal(10_000).round(2),
            "tags": pa.array([[f"t{j}" for j in range(i % 3)] for i in range(10_000)]),
        }
    )
    try:
        import lance.file as lance_file
    except ImportError:  # pylance is a test dependency only
        lance_file = None
    for version in ("2.0", "2.1", "2.2"):
        path = os.path.join(work, f"quickstart-{version}.lance")
        size = tformat.write_file(path, table, file_version=version)
        back = tformat.read_file(path)
        assert back.equals(table), f"round trip failed for {version}"
        some = tformat.FileReader(path).take([0, 4_242, 9_999], columns=["id", "city"])
        line = f"file format {version}: {size:>9,} bytes, {back.num_rows:,} rows read back equal; take -> {some.to_pylist()[1]}"
        if lance_file is not None:
            assert lance_file.LanceFileReader(path).read_all().to_table().equals(table)
            line += "; pylance reads it equal"
        print(line)
    print(f"files in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
