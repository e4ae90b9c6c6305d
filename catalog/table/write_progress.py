"""The ``progress=`` of the writes that add rows (``Table.create``,
``Table.append``, ``Table.overwrite``, ``Catalog.create_table``).

``progress`` is one of two things, anything else is refused with
:class:`InvalidArgumentError` before a byte is written:

* an object with ``begin(fragment)`` and ``complete(fragment)`` methods:
  pylance's ``write_dataset(progress=FragmentWriteProgress)`` contract, so a
  ``lance.progress.FragmentWriteProgress`` subclass works unchanged.  Each data
  file (one fragment) the write makes is announced, in order: ``begin`` before
  it is opened, ``complete`` once it is finished.  The argument is a
  :class:`WrittenFragment`, which has the attributes of pylance's
  ``FragmentMetadata`` (Tessera does not import lance): ``id`` is 0, as in
  pylance (ids are assigned at commit), ``files`` is empty and
  ``physical_rows`` None at ``begin``; at ``complete`` they describe the
  finished file.  Unlike pylance 14, which never completes a write's last
  fragment, every ``begin`` is followed by its ``complete``.
* a callable ``progress(phase, done, total)``, the shape of every other
  ``progress=`` of :class:`Table` (``compact``, ``cleanup``): called with
  ``("writing rows", 0, total)`` first, then after each batch the writer has
  taken (at most :data:`BATCH_ROWS` rows: a large batch is sliced, without
  copying) with ``done``, the rows written so far.  ``total`` is the number
  of rows of the data when it is known before writing (a pyarrow Table or
  RecordBatch, a pandas or Polars frame, a list, a dict of columns), else
  None (a RecordBatchReader or another stream).

What ``begin``, ``complete`` or the callable raise aborts the write: its
data files are deleted, nothing is committed, and the exception propagates
unchanged (raising from ``progress`` is how a caller cancels a write).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Protocol, TypeAlias

import pyarrow as pa

from tessera.format.protos import table_pb2

from ..errors import InvalidArgumentError

#: the phase a callable ``progress`` is told
ROWS_PHASE = "writing rows"
#: the most rows a callable ``progress`` waits for between two calls
BATCH_ROWS = 65_536


class FragmentProgress(Protocol):
    """pylance's ``FragmentWriteProgress``: told as each fragment is begun and completed."""

    def begin(self, fragment: Any, /) -> None: ...

    def complete(self, fragment: Any, /) -> None: ...


RowsProgress: TypeAlias = Callable[[str, int, "int | None"], None]
"""``progress(phase, done, total)``: the rows written so far (``total``: None when not known)."""

WriteProgress: TypeAlias = "FragmentProgress | RowsProgress"
"""What a write's ``progress=`` accepts (see the module's documentation)."""


@dataclasses.dataclass(frozen=True)
class WrittenFile:
    """A data file of a :class:`WrittenFragment`: the attributes of pylance's ``DataFile``."""

    path: str
    fields: list[int]
    column_indices: list[int]
    file_major_version: int
    file_minor_version: int
    file_size_bytes: int | None = None
    base_id: int | None = None


@dataclasses.dataclass(frozen=True)
class WrittenFragment:
    """The fragment a write's ``begin``/``complete`` are told about, with the
    attributes of pylance's ``FragmentMetadata``: ``id`` (0 until the commit
    assigns it), ``files`` (none at ``begin``), ``physical_rows`` (None at
    ``begin``), ``num_rows``, ``deletion_file`` (None: a new fragment has no
    deletions) and ``to_json()``."""

    id: int = 0
    files: list[WrittenFile] = dataclasses.field(default_factory=list)
    physical_rows: int | None = None
    deletion_file: None = None
    row_id_meta: None = None
    created_at_version_meta: None = None
    last_updated_at_version_meta: None = None
    overlays: list[Any] = dataclasses.field(default_factory=list)

    @property
    def num_deletions(self) -> int:
        return 0

    @property
    def num_rows(self) -> int | None:
        return self.physical_rows

    @classmethod
    def of(cls, frag: table_pb2.DataFragment) -> WrittenFragment:
        files = [
            WrittenFile(
                f.path,
                list(f.fields),
                list(f.column_indices),
                f.file_major_version,
                f.file_minor_version,
                f.file_size_bytes or None,
            )
            for f in frag.files
        ]
        return cls(id=frag.id, files=files, physical_rows=frag.physical_rows)

    def to_json(self) -> dict[str, Any]:
        """As pylance's ``FragmentMetadata.to_json()``."""
        return dataclasses.asdict(self)


def _refuse_call(fn: Any, args: tuple[Any, ...], what: str) -> None:
    """Refuse ``fn`` unless it can be called with ``args``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: taken on trust
        return
    try:
        sig.bind(*args)
    except TypeError as exc:
        raise InvalidArgumentError(f"progress is called as {what}, which {fn!r} does not accept ({exc})") from None


def check(progress: object) -> WriteProgress | None:
    """``progress`` when it is one of the two shapes a write's ``progress=`` takes."""
    if progress is None:
        return None
    if isinstance(progress, type):
        raise InvalidArgumentError(f"progress: pass an instance of {progress.__name__}, not the class")
    begin, complete = getattr(progress, "begin", None), getattr(progress, "complete", None)
    if begin is not None or complete is not None:
        if not callable(begin) or not callable(complete):
            missing = "begin" if not callable(begin) else "complete"
            raise InvalidArgumentError(
                f"progress: {type(progress).__name__} has no {missing}(fragment) method; a fragment "
                "progress (pylance's FragmentWriteProgress) has begin(fragment) and complete(fragment)"
            )
        _refuse_call(begin, (WrittenFragment(),), "begin(fragment)")
        _refuse_call(complete, (WrittenFragment(),), "complete(fragment)")
        return progress  # type: ignore[return-value]
    if not callable(progress):
        raise InvalidArgumentError(
            f"progress must be a callable progress(phase, done, total) or an object with begin(fragment) "
            f"and complete(fragment) methods (pylance's FragmentWriteProgress), got {type(progress).__name__}"
        )
    _refuse_call(progress, (ROWS_PHASE, 0, None), "progress(phase, done, total)")
    return progress


def known_rows(data: Any) -> int | None:
    """The rows of ``data`` when known without reading it (None: a stream)."""
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return int(data.num_rows)
    if isinstance(data, dict):
        first = next(iter(data.values()), None)
        return len(first) if isinstance(first, Sized) else None
    if isinstance(data, list) or type(data).__module__.split(".")[0] in ("pandas", "polars"):
        try:
            return len(data)
        except TypeError:  # a lazy frame
            return None
    return None


class Tracker:
    """Tells a write's ``progress`` (checked) how the write goes: its
    :meth:`batches` count the rows, :attr:`on_open`/:attr:`on_finish` are
    the fragment writer's hooks (None when ``progress`` does not want them)."""

    def __init__(self, progress: object, data: Any = None) -> None:
        checked = check(progress)
        self.rows: RowsProgress | None = None
        self.on_open: Callable[[], None] | None = None
        self.on_finish: Callable[[table_pb2.DataFragment], None] | None = None
        self.total: int | None = None
        if checked is None:
            return
        if callable(getattr(checked, "begin", None)):
            fragments: FragmentProgress = checked  # type: ignore[assignment]
            self.on_open = lambda: fragments.begin(WrittenFragment())
            self.on_finish = lambda frag: fragments.complete(WrittenFragment.of(frag))
        else:
            self.rows = checked  # type: ignore[assignment]
            self.total = known_rows(data)

    def batches(self, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        """``batches`` as the writer should take them: each at most
        :data:`BATCH_ROWS` rows, the rows told after the writer took them."""
        return batches if self.rows is None else self._counted(batches, self.rows)

    def _counted(self, batches: Iterable[pa.RecordBatch], tell: RowsProgress) -> Iterator[pa.RecordBatch]:
        done = 0
        tell(ROWS_PHASE, 0, self.total)
        for batch in batches:
            if batch.num_rows == 0:
                yield batch
                continue
            for start in range(0, batch.num_rows, BATCH_ROWS):
                piece = batch.slice(start, BATCH_ROWS)
                yield piece  # the writer asks for the next one once it has written this one
                done += piece.num_rows
                tell(ROWS_PHASE, done, self.total)
