"""Mutation fuzz: corrupt one file of a table, then read the table.

Small tables are built on local disk (Tessera 2.0 and 2.2 data files, deletion
files in both encodings, stable row ids, and tables written by pylance with
2.0 and 2.2 data files).
Each case mutates one file - the latest manifest (raw bytes, or parsed and
re-serialised with a field changed), a data file (raw bytes, or a field of a
column's metadata or of the file descriptor) or a deletion file - and then
opens and reads the table.  A case passes when every operation either
works or raises a :class:`format.errors.TesseraError` subclass, and when the
operations that work agree with each other (``count_rows`` with the rows
``to_arrow`` returns, a filtered read with the full read filtered, ``take``
with the full read).  Any other exception, a disagreement or a case running
longer than ``CASE_SECONDS`` fails, printing the seed and case number.

Environment::

    TESSERA_FUZZ_CASES    number of cases (default 1500)
    TESSERA_FUZZ_SECONDS  stop starting new cases after this long (default 25)
    TESSERA_FUZZ_SEED     base seed (default 20240611)
    TESSERA_FUZZ_CASE     run only this case number (reproduce one failure)

Every case draws from its own ``random.Random(f"{seed}:{case}")``, so a case
is reproduced by its seed and number whatever ran before it (files are picked
in fragment order, and the latest manifest's timestamp and deletion file ids
are fixed after the build, so its bytes keep their positions).  A failing
case's mutated table is also kept, under ``<tables dir>-failures/``.
``REGRESSIONS`` lists cases of other seeds that once failed; they run first.
``python tests/format/test_mutation_fuzz.py CASES [SEED]`` runs a long
campaign and prints each distinct failure once.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import struct
import threading
import time
import traceback

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tessera.catalog import Table
from tessera.format.errors import TesseraError
from tessera.format.table import deletion as ldeletion
from tessera.format.table import manifest as mf

CASES = int(os.environ.get("TESSERA_FUZZ_CASES", "1500"))
SECONDS = float(os.environ.get("TESSERA_FUZZ_SECONDS", "25"))
SEED = int(os.environ.get("TESSERA_FUZZ_SEED", "20240611"))
ONLY = os.environ.get("TESSERA_FUZZ_CASE")
CASE_SECONDS = 8.0  # generous: a loaded 2-core machine; a hang runs forever


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: untyped errors the fuzz knows of and tolerates while they are being fixed:
#: (exception class name, file it is raised from, words of its message); none now
KNOWN_ELSEWHERE: list[tuple[str, str, str]] = []


#: (seed, case) of failures found by long campaigns after the fixes of the
#: seeded run above: always run first (the tables are built the same way, so
#: a case mutates the same bytes)
REGRESSIONS = [
    (82, 1480),  # 2.0 strings: a corrupt offset made take allocate 32 GiB (format/file/v20 pick_binary)
    (83, 3542),  # the same, 4 EiB
]


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so no ``except Exception`` swallows it."""


# -- the tables ----------------------------------------------------------------------------


def _data(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "i": i,
            "s": pa.array([f"s{x}" if x % 5 else None for x in i]),
            "f": (i * 0.5).astype(np.float32),
            "l": pa.array([[int(x), int(x) + 1][: x % 3] for x in i], pa.list_(pa.int32())),
            "st": pa.array([{"a": int(x), "b": f"b{x}"} for x in i]),
        }
    )


def _build(root: str) -> dict[str, str]:
    """The template tables, by name -> path."""
    out = {}
    for fv in ("2.0", "2.2"):
        p = os.path.join(root, f"t{fv}")
        t = Table.create(p, _data(40), file_version=fv)
        t.append(_data(30, 40))
        t.delete("i % 7 = 3")  # arrow deletion files
        out[f"t{fv}"] = p
    # a bitmap deletion file (more than 5000 deleted rows in one fragment)
    p = os.path.join(root, "bitmap")
    t = Table.create(
        p, pa.table({"i": np.arange(6000, dtype=np.int64), "s": [str(x) for x in range(6000)]}), file_version="2.2"
    )
    t.delete("i >= 10")
    out["bitmap"] = p
    p = os.path.join(root, "rowids")
    t = Table.create(p, _data(30), file_version="2.2", stable_row_ids=True)
    t.append(_data(20, 30))
    t.delete("i % 4 = 1")
    out["rowids"] = p
    import lance

    for name, version in (("pylance", "2.2"), ("pylance2.0", "2.0")):
        p = os.path.join(root, name)
        first = pa.table(
            {
                "i": np.arange(50, dtype=np.int64),
                "s": [f"x{x}" for x in range(50)],
                "l": pa.array([[x] * (x % 3) for x in range(50)], pa.list_(pa.int64())),
            }
        )
        ds = lance.write_dataset(first, p, data_storage_version=version)
        ds = lance.write_dataset(first.slice(20, 30), p, mode="append")
        ds.delete("i % 6 = 0")
        out[name] = p
    for p in out.values():
        _normalise(p)
    return out


def _normalise(path: str) -> None:
    """Make the latest manifest's bytes the same in every build, so a case
    mutates the same bytes wherever it runs: a fixed timestamp and fixed
    deletion file ids (random, so of varying varint length, otherwise)."""
    target = _latest_manifest(path)
    mfile = mf.read_manifest(open(target, "rb").read(), target)
    m = mfile.manifest
    m.timestamp.seconds, m.timestamp.nanos = 1_700_000_000, 123_456_789
    renamed = {}
    for frag in m.fragments:
        if frag.HasField("deletion_file"):
            d = frag.deletion_file
            old = ldeletion.deletion_file_path(frag.id, d)
            renamed[d.id] = new_id = 1_000_000 + frag.id
            d.id = new_id
            os.replace(os.path.join(path, old), os.path.join(path, ldeletion.deletion_file_path(frag.id, d)))
    txn = mfile.transaction
    if txn is not None and txn.WhichOneof("operation") == "delete":
        for frag in txn.delete.updated_fragments:
            if frag.HasField("deletion_file") and frag.deletion_file.id in renamed:
                frag.deletion_file.id = renamed[frag.deletion_file.id]
    with open(target, "wb") as f:
        f.write(mf.write_manifest(m, txn, mfile.index_section))


def _ordered_files(path: str, kind: str) -> list[str]:
    """The latest version's data ("data") or deletion ("_deletions") files,
    in fragment order (their names are random; their order must not be)."""
    target = _latest_manifest(path)
    m = mf.read_manifest(open(target, "rb").read(), target).manifest
    out = []
    for frag in m.fragments:
        if kind == "data":
            out += [os.path.join(path, "data", df.path) for df in frag.files]
        elif frag.HasField("deletion_file"):
            out.append(os.path.join(path, ldeletion.deletion_file_path(frag.id, frag.deletion_file)))
    return out


def _latest_manifest(path: str) -> str:
    d = os.path.join(path, "_versions")
    found = mf.scan_versions(os.listdir(d))[0]
    return os.path.join(d, found[max(found)])


# -- mutations -----------------------------------------------------------------------------


def _bytes_mutation(rng: random.Random, data: bytes, tail_bias: bool) -> tuple[bytes, str]:
    """A raw mutation of ``data``; with ``tail_bias`` most positions fall in
    the last few hundred bytes (where a Lance file keeps its metadata)."""
    n = len(data)

    def pos() -> int:
        if tail_bias and n and rng.random() < 0.7:
            return max(0, n - 1 - int(rng.expovariate(1 / 120)) % n)
        return rng.randrange(n) if n else 0

    kind = rng.choice(["flip", "flip", "flips", "byte", "truncate", "insert", "delete", "zero", "ones", "dup"])
    b = bytearray(data)
    if not n:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))), "random bytes"
    if kind == "flip":
        p, bit = pos(), rng.randrange(8)
        b[p] ^= 1 << bit
        return bytes(b), f"flip bit {bit} at {p}"
    if kind == "flips":
        ps = [pos() for _ in range(rng.randrange(2, 9))]
        for p in ps:
            b[p] ^= 1 << rng.randrange(8)
        return bytes(b), f"flip bits at {ps}"
    if kind == "byte":
        p, v = pos(), rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        b[p] = v
        return bytes(b), f"byte {v:#x} at {p}"
    if kind == "truncate":
        cut = pos()
        return bytes(b[:cut]), f"truncate to {cut}"
    if kind == "insert":
        p = pos()
        extra = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 2, 4, 8, 17])))
        return bytes(b[:p] + extra + b[p:]), f"insert {extra.hex()} at {p}"
    if kind == "delete":
        p = pos()
        k = rng.choice([1, 2, 4, 8, 64])
        return bytes(b[:p] + b[p + k :]), f"delete {k} at {p}"
    if kind in ("zero", "ones"):
        p = pos()
        k = rng.choice([1, 4, 8, 16])
        b[p : p + k] = (b"\x00" if kind == "zero" else b"\xff") * len(b[p : p + k])
        return bytes(b), f"{kind} {k} at {p}"
    p, k = pos(), rng.choice([4, 8, 40])
    return bytes(b[:p] + b[p : p + k] * 2 + b[p + k :]), f"duplicate {k} at {p}"


BAD_PATHS = [
    "",
    ".",
    "..",
    "../x.lance",
    "a\x00b.lance",
    "x" * 300 + ".lance",
    "/etc/passwd",
    "/",
    "data",
    "sub/dir/missing.lance",
    "\\..\\x",
    "./",
    "%00",
    "../../../../tmp",
]
LOGICAL_TYPES = [
    "int8",
    "int32",
    "int64",
    "uint64",
    "float",
    "double",
    "halffloat",
    "string",
    "large_string",
    "binary",
    "bool",
    "null",
    "struct",
    "list",
    "large_list",
    "list.struct",
    "date32:day",
    "timestamp:us:-",
    "timestamp:xx:UTC",
    "time64:ns",
    "time32:x",
    "decimal:128:10:2",
    "decimal:x:y:z",
    "decimal:128:99:2",
    "fixed_size_binary:4",
    "fixed_size_binary:-1",
    "fixed_size_list:float:4",
    "fixed_size_list:float:0",
    "fixed_size_list::",
    "fixed_size_list:struct:3",
    "duration:s",
    "",
    "bogus",
    "dictionary:int32:string",
    "timestamp",
    "decimal:256:80:90",
]
BIG = [0, 1, -1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1]


def _u64(rng: random.Random, base: int) -> int:
    v = rng.choice([base + 1, base - 1, 0, 1, base * 2, rng.choice(BIG), rng.randrange(1000)])
    return v % 2**64


def _i32(rng: random.Random) -> int:
    return rng.choice([-2, -1, 0, 1, 2, 3, 5, 7, 100, 2**31 - 1, -(2**31)])


def _structured(rng: random.Random, data: bytes, path: str) -> tuple[bytes, str]:
    """Parse the manifest, change one field, serialise it again."""
    mfile = mf.read_manifest(data, path)
    m = mfile.manifest
    frags = list(m.fragments)
    frag = rng.choice(frags) if frags else None
    df = rng.choice(list(frag.files)) if frag is not None and len(frag.files) else None
    fld = rng.choice(list(m.fields)) if len(m.fields) else None
    choices = [
        "path",
        "logical_type",
        "field_id",
        "parent_id",
        "field_name",
        "nullable",
        "drop_field",
        "dup_field",
        "frag_id",
        "physical_rows",
        "del_rows",
        "del_type",
        "del_id",
        "del_version",
        "add_deletion",
        "drop_deletion",
        "df_fields",
        "df_columns",
        "df_version",
        "file_size",
        "version",
        "max_fragment_id",
        "flags",
        "data_format",
        "dup_fragment",
        "drop_files",
        "timestamp",
        "base_id",
        "row_ids",
        "next_row_id",
        "schema_metadata",
        "txn",
        "index_section",
        "swap_paths",
        "ext_row_ids",
        "dup_file",
    ]
    what = rng.choice(choices)
    desc = what
    if what == "path" and df is not None:
        df.path = rng.choice(BAD_PATHS)
        desc = f"data file path -> {df.path!r}"
    elif what == "swap_paths" and len(frags) > 1:
        a, b = rng.sample(frags, 2)
        a.files[0].path, b.files[0].path = b.files[0].path, a.files[0].path
        desc = f"swap data files of fragments {a.id} and {b.id}"
    elif what == "logical_type" and fld is not None:
        fld.logical_type = rng.choice(LOGICAL_TYPES)
        desc = f"field {fld.id} logical type -> {fld.logical_type!r}"
    elif what == "field_id" and fld is not None:
        fld.id = _i32(rng)
        desc = f"field {fld.name!r} id -> {fld.id}"
    elif what == "parent_id" and fld is not None:
        fld.parent_id = _i32(rng)
        desc = f"field {fld.name!r} parent -> {fld.parent_id}"
    elif what == "field_name" and fld is not None:
        fld.name = rng.choice(["", "i", "s", "_rowid", "_rowaddr", "x\x00y", "é"])
        desc = f"field {fld.id} name -> {fld.name!r}"
    elif what == "nullable" and fld is not None:
        fld.nullable = not fld.nullable
        desc = f"field {fld.id} nullable -> {fld.nullable}"
    elif what == "drop_field" and fld is not None:
        m.fields.remove(fld)
        desc = f"drop field {fld.id}"
    elif what == "dup_field" and fld is not None:
        m.fields.add().CopyFrom(fld)
        desc = f"duplicate field {fld.id}"
    elif what == "frag_id" and frag is not None:
        frag.id = _u64(rng, frag.id)
        desc = f"fragment id -> {frag.id}"
    elif what == "physical_rows" and frag is not None:
        frag.physical_rows = _u64(rng, frag.physical_rows)
        desc = f"fragment {frag.id} physical_rows -> {frag.physical_rows}"
    elif what == "del_rows" and frag is not None and frag.HasField("deletion_file"):
        frag.deletion_file.num_deleted_rows = _u64(rng, frag.deletion_file.num_deleted_rows)
        desc = f"fragment {frag.id} num_deleted_rows -> {frag.deletion_file.num_deleted_rows}"
    elif what == "del_type" and frag is not None and frag.HasField("deletion_file"):
        frag.deletion_file.file_type = rng.choice([0, 1, 2, 99])
        desc = f"fragment {frag.id} deletion file_type -> {frag.deletion_file.file_type}"
    elif what == "del_id" and frag is not None and frag.HasField("deletion_file"):
        frag.deletion_file.id = _u64(rng, frag.deletion_file.id)
        desc = f"fragment {frag.id} deletion id -> {frag.deletion_file.id}"
    elif what == "del_version" and frag is not None and frag.HasField("deletion_file"):
        frag.deletion_file.read_version = _u64(rng, frag.deletion_file.read_version)
        desc = f"fragment {frag.id} deletion read_version -> {frag.deletion_file.read_version}"
    elif what == "add_deletion" and frag is not None:
        other = [f for f in frags if f.HasField("deletion_file") and f is not frag]
        if other:
            frag.deletion_file.CopyFrom(rng.choice(other).deletion_file)
        else:
            frag.deletion_file.num_deleted_rows = 1
        desc = f"fragment {frag.id} gets deletion file {frag.deletion_file}".replace("\n", " ")
    elif what == "drop_deletion" and frag is not None:
        frag.ClearField("deletion_file")
        desc = f"fragment {frag.id} loses its deletion file"
    elif what == "df_fields" and df is not None:
        if df.fields and rng.random() < 0.7:
            k = rng.randrange(len(df.fields))
            df.fields[k] = _i32(rng)
        else:
            df.fields.append(_i32(rng))
        desc = f"data file fields -> {list(df.fields)}"
    elif what == "df_columns" and df is not None:
        if df.column_indices and rng.random() < 0.7:
            k = rng.randrange(len(df.column_indices))
            df.column_indices[k] = _i32(rng)
        else:
            df.ClearField("column_indices")
        desc = f"data file column_indices -> {list(df.column_indices)}"
    elif what == "df_version" and df is not None:
        df.file_major_version, df.file_minor_version = rng.choice(
            [(0, 0), (0, 3), (2, 0), (2, 1), (2, 2), (3, 0), (2**32 - 1, 7)]
        )
        desc = f"data file version -> {df.file_major_version}.{df.file_minor_version}"
    elif what == "file_size" and df is not None:
        df.file_size_bytes = _u64(rng, df.file_size_bytes)
        desc = f"data file size -> {df.file_size_bytes}"
    elif what == "version":
        m.version = _u64(rng, m.version)
        desc = f"manifest version -> {m.version}"
    elif what == "max_fragment_id":
        m.max_fragment_id = _u64(rng, m.max_fragment_id) % 2**32
        desc = f"max_fragment_id -> {m.max_fragment_id}"
    elif what == "flags":
        m.reader_feature_flags = rng.choice([0, 1, 2, 3, 4, 8, 15, 16, 2**63])
        desc = f"reader flags -> {m.reader_feature_flags}"
    elif what == "data_format":
        m.data_format.version = rng.choice(["", "2.0", "2.1", "2.2", "0.1", "9.9", "stable", "legacy", "x"])
        desc = f"data_format.version -> {m.data_format.version!r}"
    elif what == "dup_fragment" and frag is not None:
        m.fragments.add().CopyFrom(frag)
        desc = f"duplicate fragment {frag.id}"
    elif what == "drop_files" and frag is not None:
        frag.ClearField("files")
        desc = f"fragment {frag.id} loses its data files"
    elif what == "dup_file" and df is not None:
        frag.files.add().CopyFrom(df)
        desc = f"fragment {frag.id} lists data file {df.path} twice"
    elif what == "timestamp":
        m.timestamp.seconds = rng.choice([-(2**62), -1, 2**40, 2**62, 253402300800])
        m.timestamp.nanos = rng.choice([0, -1, 10**9, 2**31 - 1])
        desc = f"timestamp -> {m.timestamp.seconds}s {m.timestamp.nanos}ns"
    elif what == "base_id" and df is not None:
        df.base_id = rng.choice([0, 1, 7])
        desc = f"data file base_id -> {df.base_id}"
    elif what == "row_ids" and frag is not None:
        frag.inline_row_ids = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24)))
        desc = f"fragment {frag.id} inline row ids -> {frag.inline_row_ids.hex()}"
    elif what == "ext_row_ids" and frag is not None:
        frag.external_row_ids.path = rng.choice(BAD_PATHS + ["_versions"])
        frag.external_row_ids.offset = rng.choice([0, 1, 2**63])
        frag.external_row_ids.size = rng.choice([0, 1, 2**64 - 1])
        desc = f"fragment {frag.id} external row ids -> {frag.external_row_ids}".replace("\n", " ")
    elif what == "next_row_id":
        m.next_row_id = _u64(rng, m.next_row_id)
        desc = f"next_row_id -> {m.next_row_id}"
    elif what == "schema_metadata":
        m.schema_metadata[rng.choice(["", "x", "\x00"])] = bytes(rng.getrandbits(8) for _ in range(5))
        desc = "schema metadata entry added"
    elif what == "txn":
        mfile = dataclasses.replace(mfile, transaction=None)
        desc = "inline transaction dropped"
    elif what == "index_section":
        mfile = dataclasses.replace(mfile, index_section=bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 16))))
        desc = f"index section -> {mfile.index_section.hex()}"
    else:
        desc = f"{what} (not applicable: unchanged)"
    return mf.write_manifest(m, mfile.transaction, mfile.index_section), desc


_FOOTER = struct.Struct("<QQQIIHH4s")


def _data_structured(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Parse a data file's tail, change one field of a column's metadata or
    of the file descriptor, and write the tail again."""
    from tessera.format.protos import file2_pb2, file_pb2

    if len(data) < _FOOTER.size:
        return _bytes_mutation(rng, data, tail_bias=True)
    cm_start, cmo, gbo, ngb, ncols, major, minor, magic = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    metas = [data[o : o + n] for o, n in (struct.unpack_from("<QQ", data, cmo + 16 * i) for i in range(ncols))]
    gbufs = [struct.unpack_from("<QQ", data, gbo + 16 * i) for i in range(ngb)]
    prefix = bytearray(data[:cm_start])
    if rng.random() < 0.3 and gbufs:
        pos, n = gbufs[0]
        fd = file_pb2.FileDescriptor()
        fd.ParseFromString(data[pos : pos + n])
        what = rng.choice(["length", "logical_type", "field_id", "drop_field"])
        if what == "length":
            fd.length = _u64(rng, fd.length)
        elif what == "logical_type" and len(fd.schema.fields):
            rng.choice(list(fd.schema.fields)).logical_type = rng.choice(LOGICAL_TYPES)
        elif what == "field_id" and len(fd.schema.fields):
            rng.choice(list(fd.schema.fields)).id = _i32(rng)
        elif what == "drop_field" and len(fd.schema.fields):
            fd.schema.fields.remove(rng.choice(list(fd.schema.fields)))
        desc = f"file descriptor {what}"
        new = fd.SerializeToString()
        prefix += b"\0" * (-len(prefix) % 64)
        gbufs[0] = (len(prefix), len(new))
        prefix += new
        cm_start = len(prefix)
    elif metas:
        i = rng.randrange(len(metas))
        cm = file2_pb2.ColumnMetadata()
        cm.ParseFromString(metas[i])
        what = rng.choice(
            [
                "page_length",
                "buffer_offset",
                "buffer_size",
                "drop_page",
                "dup_page",
                "encoding_byte",
                "column_buffer",
                "swap_pages",
            ]
        )
        page = rng.choice(list(cm.pages)) if len(cm.pages) else None
        if page is None:
            what = "column_buffer"
        if what == "page_length":
            page.length = _u64(rng, page.length)
        elif what == "buffer_offset" and len(page.buffer_offsets):
            k = rng.randrange(len(page.buffer_offsets))
            page.buffer_offsets[k] = _u64(rng, page.buffer_offsets[k])
        elif what == "buffer_size" and len(page.buffer_sizes):
            k = rng.randrange(len(page.buffer_sizes))
            page.buffer_sizes[k] = _u64(rng, page.buffer_sizes[k])
        elif what == "drop_page":
            cm.pages.remove(page)
        elif what == "dup_page":
            cm.pages.add().CopyFrom(page)
        elif what == "swap_pages" and len(cm.pages) > 1:
            a, b = rng.sample(range(len(cm.pages)), 2)
            pa_, pb_ = file2_pb2.ColumnMetadata.Page(), file2_pb2.ColumnMetadata.Page()
            pa_.CopyFrom(cm.pages[a])
            pb_.CopyFrom(cm.pages[b])
            cm.pages[a].CopyFrom(pb_)
            cm.pages[b].CopyFrom(pa_)
        elif what == "encoding_byte" and page.encoding.direct.encoding:
            enc = bytearray(page.encoding.direct.encoding)
            enc[rng.randrange(len(enc))] ^= 1 << rng.randrange(8)
            page.encoding.direct.encoding = bytes(enc)
        elif what == "column_buffer" and len(cm.buffer_offsets):
            k = rng.randrange(len(cm.buffer_offsets))
            cm.buffer_offsets[k] = _u64(rng, cm.buffer_offsets[k])
        desc = f"column {i} metadata {what}"
        metas[i] = cm.SerializeToString()
    else:
        return _bytes_mutation(rng, data, tail_bias=True)
    out = prefix
    table = b""
    for m in metas:
        table += struct.pack("<QQ", len(out), len(m))
        out += m
    new_cmo = len(out)
    out += table
    new_gbo = len(out)
    for pos, n in gbufs:
        out += struct.pack("<QQ", pos, n)
    out += _FOOTER.pack(cm_start, new_cmo, new_gbo, ngb, ncols, major, minor, magic)
    return bytes(out), desc


@dataclasses.dataclass
class Case:
    table: str
    target: str  # file path mutated
    description: str


def mutate(rng: random.Random, tables: dict[str, str]) -> tuple[Case, bytes]:
    name = rng.choice(sorted(tables))
    path = tables[name]
    kind = rng.choices(["manifest_struct", "manifest_bytes", "data", "data_struct", "deletion"], [4, 2, 2, 2, 1.5])[0]
    if kind == "deletion" and not _ordered_files(path, "_deletions"):
        kind = "data"
    if kind.startswith("manifest"):
        target = _latest_manifest(path)
        data = open(target, "rb").read()
        if kind == "manifest_struct":
            new, desc = _structured(rng, data, target)
        else:
            new, desc = _bytes_mutation(rng, data, tail_bias=False)
    else:
        target = rng.choice(_ordered_files(path, "_deletions" if kind == "deletion" else "data"))
        data = open(target, "rb").read()
        if kind == "data_struct":
            new, desc = _data_structured(rng, data)
        else:
            new, desc = _bytes_mutation(rng, data, tail_bias=(kind == "data"))
    return Case(name, os.path.relpath(target, path), desc), new


# -- reading a mutated table ---------------------------------------------------------------


class WrongAnswer(AssertionError):
    pass


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Tables equal, with NaN equal to NaN (a flipped float is still the same read)."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for x, y in zip(a.columns, b.columns):
        if pa.types.is_floating(x.type):
            x = pc.if_else(pc.is_nan(x), None, x)
            y = pc.if_else(pc.is_nan(y), None, y)
        if not x.equals(y):
            return False
    return True


def exercise(path: str, name: str) -> list[str]:
    """Every read; returns which raised a TesseraError (for the summary)."""
    typed: list[str] = []
    try:
        t = Table.open(path)
    except TesseraError as exc:
        return [f"open: {type(exc).__name__}"]
    results: dict[str, object] = {}

    def run(label, fn):
        try:
            results[label] = fn()
        except TesseraError as exc:
            typed.append(f"{label}: {type(exc).__name__}")

    run("count_rows", t.count_rows)
    run("to_arrow", t.to_arrow)
    run("filter", lambda: t.to_arrow(filter="i > 20"))
    run("count_filter", lambda: t.count_rows(filter="i > 20"))
    run("no_columns", lambda: t.to_arrow(columns=[]).num_rows)
    full = results.get("to_arrow")
    n = results.get("count_rows")
    idx = [0, 3, 2, 11] if not isinstance(n, int) or n <= 0 else sorted({0, n // 2, n - 1}) + [0]
    run("take", lambda: t.take(idx))
    run("versions", t.versions)
    if name == "rowids":
        run("take_rows_fixed", lambda: t.take_rows([0, 5, 10, 33, 10**6], columns=["i"]))
    # _rowid: the stable row id, or the row address; take_rows must find those rows again
    run("with_row_id", lambda: t.to_arrow(columns=["i"], with_row_id=True))
    wr = results.get("with_row_id")
    picks = None
    if isinstance(wr, pa.Table) and wr.num_rows:
        picks = sorted({0, wr.num_rows // 3, wr.num_rows - 1})
        ids = wr["_rowid"].take(pa.array(picks))
        run("take_rows", lambda: t.take_rows(ids, columns=["i"]))
    # the reads that worked must agree
    if isinstance(full, pa.Table):
        if isinstance(n, int) and n != full.num_rows:
            raise WrongAnswer(f"count_rows() = {n} but to_arrow() returned {full.num_rows} rows")
        flt = results.get("filter")
        if isinstance(flt, pa.Table) and "i" in full.column_names and pa.types.is_integer(full.schema.field("i").type):
            want = full.filter(pc.fill_null(pc.greater(full["i"], 20), False))
            if not _same(flt, want):
                raise WrongAnswer(
                    f"to_arrow(filter) returned {flt.num_rows} rows, the full read filtered {want.num_rows}"
                )
            cf = results.get("count_filter")
            if isinstance(cf, int) and cf != want.num_rows:
                raise WrongAnswer(f"count_rows(filter) = {cf}, the full read filtered has {want.num_rows} rows")
        tk = results.get("take")
        if isinstance(tk, pa.Table) and isinstance(n, int) and n > 0 and n == full.num_rows:
            if not _same(tk, full.take(pa.array(idx))):
                raise WrongAnswer(f"take({idx}) disagrees with to_arrow()")
        nc = results.get("no_columns")
        if isinstance(nc, int) and nc != full.num_rows:
            raise WrongAnswer(f"to_arrow(columns=[]) has {nc} rows, to_arrow() {full.num_rows}")
        if isinstance(wr, pa.Table) and wr.num_rows != full.num_rows:
            raise WrongAnswer(f"to_arrow(with_row_id) returned {wr.num_rows} rows, to_arrow() {full.num_rows}")
    tr = results.get("take_rows")
    if isinstance(tr, pa.Table):
        want = wr.select(["i"]).take(pa.array(picks))
        if not _same(tr, want):
            raise WrongAnswer(
                f"take_rows(_rowid of rows {picks}) returned {tr['i'].to_pylist()}, "
                f"the scan had {want['i'].to_pylist()}"
            )
    return typed


def _alarm(signum, frame):
    raise CaseTimeout()


def run_case(tables: dict[str, str], seed: int, case: int) -> tuple[Case, list[str]]:
    """Mutate one file, exercise the table, put the file back.  Raises on a
    failure, with the case in the message."""
    rng = random.Random(f"{seed}:{case}")
    c, new = mutate(rng, tables)
    root = tables[c.table]
    target = os.path.join(root, c.target)
    original = open(target, "rb").read()
    tmp = target + ".fuzz-tmp"
    with open(tmp, "wb") as f:
        f.write(new)
    os.replace(tmp, target)  # a new inode: a reader still mapping the old file keeps it
    use_alarm = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None

    def keep() -> str:
        """A copy of the mutated table, kept for a look at the failure."""
        dst = os.path.join(os.path.dirname(root) + "-failures", f"seed{seed}-case{case}-{c.table}")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(root, dst)
        return f"\n  mutated table kept at {dst}"

    try:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            typed = exercise(root, c.table)
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except CaseTimeout:
        raise AssertionError(f"HANG (> {CASE_SECONDS}s): seed={seed} case={case} {c}{keep()}") from None
    except WrongAnswer as exc:
        raise AssertionError(f"WRONG ANSWER: seed={seed} case={case} {c}: {exc}{keep()}") from None
    except Exception as exc:  # noqa: BLE001 - the point: anything untyped is a failure
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if _ROOT in f.filename and "/tests/" not in f.filename]
        where = f"{os.path.relpath(ours[-1].filename, _ROOT)}:{ours[-1].lineno}" if ours else "?"
        for name, file, words in KNOWN_ELSEWHERE:
            if type(exc).__name__ == name and where.startswith(file + ":") and words in str(exc):
                return c, [f"known: {name} at {where}"]
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
        raise AssertionError(
            f"untyped {type(exc).__module__}.{type(exc).__qualname__} at {where}: {str(exc)[:200]}\n"
            f"  seed={seed} case={case} {c}{keep()}\n"
            f"  reproduce: TESSERA_FUZZ_SEED={seed} TESSERA_FUZZ_CASE={case} pytest {__file__}\n{tb}"
        ) from exc
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)
        with open(tmp, "wb") as f:
            f.write(original)
        os.replace(tmp, target)
    return c, typed


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return _build(str(tmp_path_factory.mktemp("fuzz")))


def test_mutation_fuzz(tables):
    runs = [(SEED, int(ONLY))] if ONLY is not None else REGRESSIONS + [(SEED, case) for case in range(CASES)]
    start = time.monotonic()
    ran, typed_cases, known, failures = 0, 0, 0, []
    for seed, case in runs:
        if ONLY is None and time.monotonic() - start > SECONDS:
            break
        try:
            _, typed = run_case(tables, seed, case)
        except AssertionError as exc:
            failures.append(str(exc))
            if len(failures) >= 5:
                break
            continue
        ran += 1
        typed_cases += bool(typed)
        known += any(t.startswith("known:") for t in typed)
    elapsed = time.monotonic() - start
    print(
        f"mutation fuzz: seed={SEED}, {ran + len(failures)} cases in {elapsed:.1f}s, "
        f"{typed_cases} raised typed errors, {known} hit a KNOWN_ELSEWHERE error, {len(failures)} failed"
    )
    assert not failures, "\n\n".join(failures)
    assert ran + len(failures) >= min(20, len(runs)), f"only {ran} cases ran in {SECONDS}s"


if __name__ == "__main__":  # a long run: python tests/format/test_mutation_fuzz.py CASES [SEED]
    import sys
    import tempfile
    from collections import Counter

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    with tempfile.TemporaryDirectory() as d:
        tbls = _build(d)
        seen: Counter = Counter()
        t0 = time.monotonic()
        for case in range(n):
            try:
                run_case(tbls, seed, case)
            except AssertionError as exc:
                msg = str(exc)
                first = msg.split("\n", 1)[0]
                key = (
                    first.split(":", 1)[0]
                    if first.startswith("untyped")
                    else first.split(" seed=")[0] + first.split("description=")[-1][:40]
                )
                seen[key] += 1
                if seen[key] == 1:
                    print(msg, "\n", flush=True)
        print(f"{n} cases in {time.monotonic() - t0:.1f}s; {sum(seen.values())} failures, {len(seen)} distinct")
