"""Helpers of the interoperability suite (loaded by tests/conftest.py
as ``tessera_test_interop``): test data, comparisons of Arrow tables, pylance
in another Python through ``lance_client.py``, and a Tessera catalog with the
ways LanceDB and pylance reach it."""

from __future__ import annotations

import json
import os
import uuid

import numpy as np
import pyarrow as pa
from tessera_test_services import TesseraServer  # loaded by tests/conftest.py
from tessera_test_venvs import run_python  # loaded by tests/conftest.py

import tessera

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lance_client.py")
DIM = 8
KEY = "id"

# quieter Lance logs in the subprocesses and here (the centroid-statistics notice)
os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")


# -- data ------------------------------------------------------------------------------


def vectors(ids: np.ndarray, dim: int = DIM) -> pa.FixedSizeListArray:
    """A vector per id, a function of the id alone (distinct ids, distinct vectors)."""
    ids = np.asarray(ids, dtype=np.float64).reshape(-1, 1)
    k = np.arange(dim, dtype=np.float64).reshape(1, -1)
    values = np.modf(np.abs(np.sin(ids * 12.9898 + k * 78.233) * 43758.5453))[0].astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), dim)


def vector_of(i: int, dim: int = DIM) -> list[float]:
    """The vector of id ``i``."""
    return vectors(np.array([i]), dim)[0].as_py()


def rows(start: int, n: int, *, dictionary: bool = True, vector: bool = True) -> pa.Table:
    """``n`` rows with ids ``start..start+n``: an int64 key, a string, a nullable
    double, a dictionary-encoded string and an 8-dim float32 vector."""
    ids = np.arange(start, start + n, dtype=np.int64)
    cols: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([f"s-{i}" for i in ids], pa.string()),
        "f": pa.array([None if i % 7 == 0 else i * 0.5 for i in ids], pa.float64()),
    }
    if dictionary:
        cols["d"] = pa.array([("red", "green", "blue")[i % 3] for i in ids], pa.string()).dictionary_encode()
    if vector:
        cols["vec"] = vectors(ids)
    return pa.table(cols)


# -- comparing -------------------------------------------------------------------------


def canonical(table: pa.Table, key: str = KEY) -> pa.Table:
    """``table`` sorted by ``key``, one chunk, dictionary columns as their values
    (two readers may split dictionaries differently), schema metadata and
    nullability flags dropped (compared by the values)."""
    cols = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col)
    fields = [pa.field(f.name, c.type) for f, c in zip(table.schema, cols)]
    out = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    if key in out.column_names and out.num_rows:
        out = out.sort_by([(key, "ascending")])
    return out.combine_chunks()


def assert_same(expected: pa.Table, got: pa.Table, what: str, key: str = KEY) -> None:
    """The same column names and types (dictionaries included) and the same rows."""
    assert got.column_names == expected.column_names, f"{what}: columns {got.column_names} != {expected.column_names}"
    assert [f.type for f in got.schema] == [f.type for f in expected.schema], (
        f"{what}: types {got.schema} != {expected.schema}"
    )
    assert got.num_rows == expected.num_rows, f"{what}: {got.num_rows} rows, expected {expected.num_rows}"
    a, b = canonical(expected, key), canonical(got, key)
    if not a.equals(b):
        for name in a.column_names:
            if not a.column(name).equals(b.column(name)):
                raise AssertionError(
                    f"{what}: column {name!r} differs:\n{a.column(name).to_pylist()[:20]}\n"
                    f"vs\n{b.column(name).to_pylist()[:20]}"
                )
        raise AssertionError(f"{what}: tables differ")


# -- pylance in a process (13 in its own venv; 14 to check the script) ---------------------


class PylanceProcess:
    """pylance in another Python, through ``lance_client.py``."""

    def __init__(self, python: str, workdir) -> None:
        self.python = python
        self.workdir = str(workdir)
        self.version: str | None = None

    def run(self, uri: str, ops: list[dict], *, timeout: float = 300) -> list[dict]:
        """The results of ``ops`` on the dataset at ``uri`` (an op's failure is a
        result ``{"error": ..., "message": ...}``, see lance_client.py)."""
        out = os.path.join(self.workdir, uuid.uuid4().hex[:12])
        os.makedirs(out)
        job = os.path.join(out, "job.json")
        with open(job, "w") as f:
            json.dump({"uri": uri, "out": out, "ops": ops}, f)
        proc = run_python(self.python, CLIENT, job, timeout=timeout, text=True)
        assert proc.returncode == 0, f"lance_client.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        self.version = answer["lance"]
        return answer["results"]

    def ok(self, uri: str, ops: list[dict], **kw) -> list[dict]:
        """:meth:`run`, every op required to succeed."""
        results = self.run(uri, ops, **kw)
        for op, res in zip(ops, results):
            assert "error" not in res, f"pylance {self.version} {op['op']} failed: {res['error']}: {res['message']}"
        return results

    def read(self, uri: str, versions: list[int], **kw) -> dict[int, pa.Table]:
        """Each version's rows as this pylance reads them."""
        (res,) = self.ok(uri, [{"op": "read", "versions": versions, **kw}])
        return {int(v): read_ipc(path) for v, path in res["files"].items()}

    def table(self, result: dict) -> pa.Table:
        return read_ipc(result["file"])


def read_ipc(path: str) -> pa.Table:
    with pa.memory_map(path) as source:
        return pa.ipc.open_stream(source).read_all()


# -- Tessera catalogs that LanceDB reaches ------------------------------------------------


class Warehouse:
    """A Tessera catalog (SQLite, local warehouse) and the ways clients reach it."""

    def __init__(self, path, lancedb_module, lance_namespace_module, server: TesseraServer | None = None) -> None:
        self.path = str(path)
        self.cat = tessera.connect(warehouse=self.path)
        self._lancedb = lancedb_module
        self._lance_namespace = lance_namespace_module
        self.server = server

    def namespace(self, name: str) -> str:
        self.cat.create_namespace(name, exist_ok=True)
        return name

    def plugin_props(self, **extra: str) -> dict[str, str]:
        """The ``tessera`` namespace plugin's properties for this catalog."""
        return {"warehouse": self.path, **extra}

    def lancedb(self, how: str = "plugin", store: str | None = None, **kw):
        """A LanceDB connection through the ``tessera`` namespace plugin
        (``how="plugin"``; the tables it declares coordinated by ``store``) or
        through ``tessera serve`` with LanceDB's REST client (``"rest"``);
        ``kw`` go to ``lancedb.connect_namespace`` (``read_consistency_interval``)."""
        if how == "plugin":
            props = self.plugin_props(**({"commit_store": store} if store else {}))
            return self._lancedb.connect_namespace("tessera", props, **kw)
        assert how == "rest" and self.server is not None, f"no {how!r} connection to this warehouse"
        return self._lancedb.connect_namespace("rest", {"uri": self.server.uri}, **kw)

    def lancedb_plugin(self):
        """A LanceDB connection through the ``tessera`` namespace plugin."""
        return self.lancedb("plugin")

    def pylance_namespace(self, **extra: str):
        """pylance 14's namespace client for this catalog (the plugin, in process)."""
        return self._lance_namespace.connect("tessera", self.plugin_props(**extra))

    def close(self) -> None:
        self.cat.close()


def lancedb_table(db, name: str):
    """LanceDB's handle on the table ``ns.t`` of a namespace connection."""
    ns, _, table = name.rpartition(".")
    return db.open_table(table, namespace_path=ns.split(".") if ns else [])


def lancedb_read(db, name: str, versions: list[int], *, with_row_id: bool = False) -> dict[int, pa.Table]:
    """Each version's rows as LanceDB reads them (one handle, checked out in turn)."""
    tbl = lancedb_table(db, name)
    out = {}
    for v in versions:
        tbl.checkout(v)
        assert tbl.version == v
        if with_row_id:
            out[v] = tbl.search().with_row_id(True).limit(None).to_arrow()
        else:
            out[v] = tbl.to_arrow()
    tbl.checkout_latest()
    return out


def lancedb_btree(tbl, column: str = KEY) -> None:
    """A BTREE index on ``column``, built by LanceDB (its Lance 13 core)."""
    from lancedb.index import BTree

    tbl.create_index(column, config=BTree())


def lancedb_ivf_pq(tbl, column: str = "vec") -> None:
    """A small IVF_PQ index (2 partitions, 2 sub-vectors) on ``column``, built by LanceDB."""
    from lancedb.index import IvfPq

    tbl.create_index(column, config=IvfPq(distance_type="l2", num_partitions=2, num_sub_vectors=2))
