"""The type matrix of the data-file interop tests: one small table per cell.

Each cell is ``name -> (table, versions)``; ``versions`` lists the file versions
that can store it (nullable structs need 2.1+).
"""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa

ALL = ("2.0", "2.1", "2.2")
V21 = ("2.1", "2.2")
N = 300  # rows per cell: several chunks in 2.1, still tiny


def _with_nulls(values: list, every: int = 7) -> list:
    return [None if i % every == 3 else v for i, v in enumerate(values)]


def _ints(dtype: str) -> pa.Table:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    vals = rng.integers(info.min, info.max, size=N, dtype=dtype, endpoint=True)
    vals[:3] = [info.min, info.max, 0]
    nullable = pa.array(_with_nulls(vals.tolist()), type=pa.from_numpy_dtype(np.dtype(dtype)))
    small = pa.array((np.arange(N) % 50).astype(dtype))
    return pa.table({"v": pa.array(vals), "vn": nullable, "small": small})


def cells() -> dict[str, tuple[pa.Table, tuple[str, ...]]]:
    rng = np.random.default_rng(7)
    out: dict[str, tuple[pa.Table, tuple[str, ...]]] = {}
    for d in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        out[d] = (_ints(d), ALL)
    f32 = rng.standard_normal(N).astype("float32")
    f64 = rng.standard_normal(N)
    out["float32"] = (pa.table({"v": f32, "vn": pa.array(_with_nulls(f32.tolist()), pa.float32())}), ALL)
    out["float64"] = (pa.table({"v": f64, "vn": pa.array(_with_nulls(f64.tolist()), pa.float64())}), ALL)
    bools = (np.arange(N) % 3 == 0).tolist()
    out["bool"] = (pa.table({"v": bools, "vn": pa.array(_with_nulls(bools), pa.bool_())}), ALL)
    words = [("w%d" % i) * (i % 5) for i in range(N)]  # includes empty strings
    out["string"] = (pa.table({"v": words, "vn": pa.array(_with_nulls(words), pa.string())}), ALL)
    out["large_string"] = (
        pa.table({"v": pa.array(words, pa.large_string()), "vn": pa.array(_with_nulls(words), pa.large_string())}),
        ALL,
    )
    blobs = [bytes(rng.integers(0, 256, size=i % 9, dtype="uint8")) for i in range(N)]
    out["binary"] = (
        pa.table({"v": pa.array(blobs, pa.binary()), "vn": pa.array(_with_nulls(blobs), pa.binary())}),
        ALL,
    )
    days = [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(N)]
    out["date32"] = (pa.table({"v": pa.array(days, pa.date32()), "vn": pa.array(_with_nulls(days), pa.date32())}), ALL)
    ts = (np.datetime64("2024-01-01T00:00:00", "us") + np.arange(N) * 1_000_003).astype("datetime64[us]")
    out["timestamp"] = (
        pa.table(
            {
                "naive": pa.array(ts, pa.timestamp("us")),
                "tz": pa.array(ts, pa.timestamp("us", tz="UTC")),
                "ns_null": pa.array(_with_nulls(ts.astype("datetime64[ns]").tolist()), pa.timestamp("ns")),
            }
        ),
        ALL,
    )
    decs = [decimal.Decimal(i * 37 - 5000) / 100 for i in range(N)]
    out["decimal128"] = (
        pa.table({"v": pa.array(decs, pa.decimal128(10, 2)), "vn": pa.array(_with_nulls(decs), pa.decimal128(10, 2))}),
        ALL,
    )
    lists = [list(range(i % 4)) for i in range(N)]  # includes empty lists
    out["list_int32"] = (
        pa.table(
            {"v": pa.array(lists, pa.list_(pa.int32())), "vn": pa.array(_with_nulls(lists), pa.list_(pa.int32()))}
        ),
        ALL,
    )
    slists = [[f"s{j}" for j in range(i % 3)] for i in range(N)]
    out["list_string"] = (pa.table({"v": pa.array(_with_nulls(slists, 5), pa.list_(pa.string()))}), ALL)
    nested = [[list(range(j)) for j in range(i % 3)] for i in range(N)]
    out["list_list_int32"] = (
        pa.table({"v": pa.array(_with_nulls(nested, 11), pa.list_(pa.list_(pa.int32())))}),
        ALL,
    )
    v4 = rng.standard_normal((N, 4)).astype("float32")
    out["fsl_f32_4"] = (
        pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(v4.ravel()), 4)}),
        ALL,
    )
    v128 = rng.standard_normal((N, 128)).astype("float32")
    out["fsl_f32_128"] = (
        pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(v128.ravel()), 128)}),
        ALL,
    )
    st = pa.StructArray.from_arrays(
        [pa.array(np.arange(N)), pa.array(_with_nulls(words), pa.string())], names=["a", "b"]
    )
    out["struct"] = (pa.table({"s": st}), ALL)
    mask = pa.array([i % 6 == 1 for i in range(N)])
    nst = pa.StructArray.from_arrays(
        [pa.array(np.arange(N, dtype="int64")), pa.array(_with_nulls(f64.tolist()), pa.float64())],
        names=["x", "y"],
        mask=mask,
    )
    out["nullable_struct"] = (pa.table({"s": nst}), V21)
    out["all_null"] = (
        pa.table({"i": pa.nulls(N, pa.int32()), "s": pa.nulls(N, pa.string()), "f": pa.nulls(N, pa.float64())}),
        ALL,
    )
    out["constant"] = (pa.table({"i": pa.array([42] * N, pa.int32()), "s": pa.array(["same"] * N)}), ALL)
    levels = ["INFO", "WARN", "ERROR", "DEBUG"]
    out["low_cardinality_string"] = (
        pa.table({"v": [levels[i % 4] for i in range(N)], "vn": _with_nulls([levels[i % 3] for i in range(N)])}),
        ALL,
    )
    out["empty_strings_and_lists"] = (
        pa.table({"s": pa.array([""] * N), "l": pa.array([[]] * N, pa.list_(pa.int64()))}),
        ALL,
    )
    out["zero_rows"] = (
        pa.table(
            {"i": pa.array([], pa.int64()), "s": pa.array([], pa.string()), "l": pa.array([], pa.list_(pa.int32()))}
        ),
        ALL,
    )
    return out


def multi_page_table(rows: int = 200_000) -> pa.Table:
    """Enough data that a small page size gives many pages per column."""
    rng = np.random.default_rng(3)
    return pa.table(
        {
            "i": np.arange(rows, dtype="int64"),
            "f": rng.standard_normal(rows),
            "s": pa.array([f"row-{i}" for i in range(rows)]),
            "l": pa.array([[i, i + 1] if i % 5 else [] for i in range(rows)], pa.list_(pa.int32())),
        }
    )
