"""``TableSnapshot``: one version of a table as an immutable value.

Every table operation (writes, mutations, schema changes, indices,
compaction, takes, clean-up) takes a snapshot instead of a ``Table``: the
object store, the commit handler, the version's manifest and the schema read
from it.  A ``Table`` holds the snapshot of the version it is pinned to and
moves to a new one after each commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow as pa

from tessera.commit import CommitHandler
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.file_cache import FileReaderCache
from tessera.format.table.fragments import DEFAULT_MAX_ROWS_PER_FILE
from tessera.stores.object_store import ObjectStore


@dataclass(frozen=True, eq=False)
class TableSnapshot:
    """A table at one version: where it is, who commits to it, what it holds
    (compared by identity: two reads of one version are two snapshots)."""

    store: ObjectStore
    mfile: mf.ManifestFile
    handler: CommitHandler
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    #: the open data file readers of the table object this snapshot belongs to (kept across its
    #: versions: data files never change), used by its scans, takes and mutations; None: none kept
    files: FileReaderCache | None = field(default=None, repr=False)
    #: the version's fields (Lance's schema; do not change the list) and its Arrow schema
    fields: list[lschema.LanceField] = field(init=False, repr=False)
    schema: pa.Schema = field(init=False, repr=False)
    #: the manifest's fragments, taken once (a list of a manifest's repeated field costs
    #: microseconds per fragment: 2.8 ms for 1,000)
    _fragments: tuple[table_pb2.DataFragment, ...] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        m = self.mfile.manifest
        fields = lschema.fields_from_protos(m.fields)
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "schema", lschema.to_arrow_schema(fields, dict(m.schema_metadata.items())))

    def at(self, mfile: mf.ManifestFile) -> TableSnapshot:
        """The same table at the version ``mfile``."""
        return self if mfile is self.mfile else replace(self, mfile=mfile)

    @property
    def uri(self) -> str:
        return self.store.uri

    @property
    def version(self) -> int:
        return self.mfile.version

    @property
    def manifest(self) -> table_pb2.Manifest:
        return self.mfile.manifest

    @property
    def index_section(self) -> bytes | None:
        """The version's index section (serialized), None without indices."""
        return self.mfile.index_section

    @property
    def file_version(self) -> str:
        return self.manifest.data_format.version or "2.0"

    @property
    def stable_row_ids(self) -> bool:
        return bool(self.manifest.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS)

    @property
    def fragments(self) -> list[table_pb2.DataFragment]:
        got = self._fragments
        if got is None:
            got = tuple(self.manifest.fragments)
            object.__setattr__(self, "_fragments", got)
        return list(got)
