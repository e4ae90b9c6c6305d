"""The options of the ``tessera`` Spark data source: every key is known or refused.

Spark hands a Python data source every ``.option(k, v)`` of the read or write
(plus ``path`` from ``load(uri)``/``save(uri)`` and ``paths`` from
``load([uri, ...])``) with keys lower-cased and values as strings; it checks
none of them.  An option the source ignored used to change nothing without a
word — and ``replaceWhere`` or ``partitionOverwriteMode`` in an overwrite then
replaced the whole table.  So each direction has one list of the options it
implements (:data:`READ_OPTIONS`, :data:`WRITE_OPTIONS`, both starting with
the :data:`LOCATION_OPTIONS` that name the table), and :class:`SparkOptions`:

* refuses, before anything is read or written, every key not in the list with
  a :class:`SparkOptionError` naming it and the nearest known option
  (``difflib``), or saying that it belongs to the other direction;
* lets the source read only the options in its list: reading one that is not
  there is a programming error (:class:`UnlistedOptionError`), so a new option
  cannot be implemented without being listed (and so accepted).

Keys are compared case-insensitively, as Spark does (it lower-cases them, and
of two keys differing only in case the last one wins; given directly, two
such keys with different values are refused).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from tessera.catalog.errors import SparkOptionError

__all__ = [
    "LOCATION_OPTIONS",
    "LOCATION_PREFIXES",
    "READ_OPTIONS",
    "WRITE_OPTIONS",
    "OptionList",
    "SparkOptions",
    "UnlistedOptionError",
    "any_option",
]


class UnlistedOptionError(LookupError):
    """The source read an option missing from its direction's list (a bug in
    the source, not in the user's options): list it where the others are."""


@dataclass(frozen=True)
class OptionList:
    """The options one direction (``"read"`` or ``"write"``) implements:
    exact names in their documented spelling, and prefixes (``storage.``)
    whose every key is passed on."""

    direction: str
    names: tuple[str, ...]
    prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lower", {n.lower(): n for n in self.names})

    def spelling(self, key: str) -> str | None:
        """The documented spelling of ``key`` (any case) if it is listed, else None."""
        key = key.lower()
        found = self._lower.get(key)  # type: ignore[attr-defined]
        if found is not None:
            return found
        return key if any(key.startswith(p) and len(key) > len(p) for p in self.prefixes) else None

    def nearest(self, key: str) -> str | None:
        """The listed option (or ``prefix.<key>``) closest to ``key``, if any is close."""
        key = key.lower()
        best = difflib.get_close_matches(key, list(self._lower), n=1, cutoff=0.6)  # type: ignore[attr-defined]
        score = difflib.SequenceMatcher(None, key, best[0]).ratio() if best else 0.0
        out: str | None = self._lower[best[0]] if best else None  # type: ignore[attr-defined]
        # a misspelt prefix: compare each head of the key up to a dot with each prefix
        for i, ch in enumerate(key):
            if ch != "." or i + 1 == len(key):
                continue
            head, rest = key[: i + 1], key[i + 1 :]
            for p in self.prefixes:
                ratio = difflib.SequenceMatcher(None, head, p).ratio()
                if ratio >= 0.75 and ratio > score:
                    score, out = ratio, p + rest
        return out

    def describe(self) -> str:
        return ", ".join([*self.names, *(p + "<key>" for p in self.prefixes)])


class SparkOptions(Mapping[str, str]):
    """A read's or a write's options, checked against its :class:`OptionList`.

    Construction refuses unknown keys (:class:`SparkOptionError`); ``get``
    and ``[]`` of a key that is not in the list raise
    :class:`UnlistedOptionError` whether or not the user gave it."""

    def __init__(
        self, raw: Mapping[str, str] | Iterable[tuple[str, str]], listed: OptionList, other: OptionList | None = None
    ) -> None:
        self.listed = listed
        items = raw.items() if isinstance(raw, Mapping) else raw
        values: dict[str, str] = {}
        for key, value in items:
            if value is None:  # given directly (never by Spark): the same as not given
                continue
            low = str(key).lower()
            if low in values and values[low] != str(value):
                raise SparkOptionError(
                    f"option {key!r} is given twice with different values ({values[low]!r}, {value!r}); "
                    "options are case-insensitive"
                )
            values[low] = str(value)
        unknown = sorted(k for k in values if listed.spelling(k) is None)
        if unknown:
            raise SparkOptionError(_unknown_message(unknown[0], listed, other, len(unknown)))
        self._values = values

    def _check(self, key: str) -> str:
        low = key.lower()
        if self.listed.spelling(low) is None:
            raise UnlistedOptionError(
                f"the tessera {self.listed.direction} reads option {key!r}, which is not in its list of options"
            )
        return low

    def __getitem__(self, key: str) -> str:
        return self._values[self._check(key)]

    def get(self, key: str, default=None):
        return self._values.get(self._check(key), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._check(key) in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The options under ``prefix`` (one of the list's prefixes), without it."""
        if prefix not in self.listed.prefixes:
            raise UnlistedOptionError(f"prefix {prefix!r} is not in the tessera {self.listed.direction} options")
        return {k[len(prefix) :]: v for k, v in self._values.items() if k.startswith(prefix) and len(k) > len(prefix)}

    def __repr__(self) -> str:
        return f"SparkOptions({self.listed.direction}, {sorted(self._values)})"


def _unknown_message(key: str, listed: OptionList, other: OptionList | None, count: int) -> str:
    direction = listed.direction
    more = f" (and {count - 1} more unknown option{'s' if count > 2 else ''})" if count > 1 else ""
    if other is not None and other.spelling(key) is not None:
        return (
            f"option {other.spelling(key)!r} is a {other.direction} option of the tessera source, not a "
            f"{direction} option{more}; drop it from the {direction}. The {direction} options are: "
            f"{listed.describe()}"
        )
    nearest = listed.nearest(key)
    hint = f" Did you mean {nearest!r}?" if nearest else ""
    done = "read" if direction == "read" else "written"
    return (
        f"unknown option {key!r} for a tessera {direction}{more}.{hint} Nothing was {done}. "
        f"The {direction} options are: {listed.describe()} (case-insensitive)"
    )


STORAGE_PREFIX = "storage."
NAMESPACE_PREFIX = "namespace."
RETRY_PREFIX = "commit.retry."

#: options naming the table and its coordinator, storage and catalog: known
#: to reads and writes alike (``path``/``paths`` are set by Spark's
#: ``load()``/``save()``; see :mod:`tessera.catalog.spark.location`)
LOCATION_OPTIONS: tuple[str, ...] = (
    "path",
    "paths",
    "table",
    "resolver",
    "catalog",
    "warehouse",
    "namespace",
    "commit_store",
)
LOCATION_PREFIXES: tuple[str, ...] = (STORAGE_PREFIX, NAMESPACE_PREFIX)

#: every option a read implements (the location's, then the read's own):
#: :class:`tessera.catalog.spark.TesseraDataSource` reads only these, and refuses any other
READ_OPTIONS = OptionList(
    "read",
    LOCATION_OPTIONS
    + (
        "version",
        "tag",
        "columns",
        "pushdown",
        "filter",
        "batch_rows",
        "min_partitions",
        "max_partition_bytes",
        "rows_per_partition",
        "read_stats_dir",
        "readChangeFeed",
        "startingVersion",
        "endingVersion",
        "skipChangeCommits",
    ),
    LOCATION_PREFIXES,
)

#: every option a write implements (the location's, then the write's own):
#: :func:`tessera.catalog.spark.write.plan_write` reads only these, and refuses any other
WRITE_OPTIONS = OptionList(
    "write",
    LOCATION_OPTIONS
    + (
        "file_version",
        "naming",
        "max_rows_per_file",
        "write_batch_rows",
        "replaceWhere",
        # idempotent writes, as Delta names them (see tessera.commit.app_txn)
        "txnAppId",
        "txnVersion",
        # a streaming query's (Spark passes it to the sink; its metadata names the query)
        "checkpointLocation",
        # Delta's, accepted only with the values that ask for what Tessera does (see write._check_delta_options)
        "partitionOverwriteMode",
        "mergeSchema",
        "overwriteSchema",
    ),
    LOCATION_PREFIXES + (RETRY_PREFIX,),
)


def any_option() -> OptionList:
    """Every read and write option: what a location accepts in a plain mapping."""
    names = dict.fromkeys(READ_OPTIONS.names + WRITE_OPTIONS.names)
    return OptionList(
        "read or write", tuple(names), tuple(dict.fromkeys(READ_OPTIONS.prefixes + WRITE_OPTIONS.prefixes))
    )
