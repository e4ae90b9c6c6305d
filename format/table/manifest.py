"""Manifest files, version naming and feature flags.

A manifest file is laid out as::

    [IndexSection]   u32 length | protobuf         (when indices exist)
    [Transaction]    u32 length | protobuf         (inline copy of the .txn file)
    Manifest         u32 length | protobuf
    footer           i64 manifest_pos | u16 major | u16 minor | "LANC"

``Manifest.index_section`` (6) and ``Manifest.transaction_section`` (23) hold the
file offsets of the sections' length prefixes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from ..errors import CorruptFileError, FormatError
from ..file.container import parse_proto
from ..protos import table_pb2, transaction_pb2

MANIFEST_FOOTER = struct.Struct("<qHH4s")
MAGIC = b"LANC"
U64_MAX = 2**64 - 1

# Feature flags, as pylance 14 sets them.
FLAG_DELETION_FILES = 1
FLAG_STABLE_ROW_IDS = 2
FLAG_USE_V2_FORMAT_DEPRECATED = 4
FLAG_TABLE_CONFIG = 8
KNOWN_READER_FLAGS = FLAG_DELETION_FILES | FLAG_STABLE_ROW_IDS | FLAG_USE_V2_FORMAT_DEPRECATED | FLAG_TABLE_CONFIG
KNOWN_WRITER_FLAGS = KNOWN_READER_FLAGS
_FLAG_NAMES = {
    FLAG_DELETION_FILES: "deletion files",
    FLAG_STABLE_ROW_IDS: "stable row ids",
    FLAG_USE_V2_FORMAT_DEPRECATED: "v2 format (deprecated)",
    FLAG_TABLE_CONFIG: "table config",
}


class UnknownFeatureFlagError(FormatError):
    """A manifest sets a feature flag this library does not understand."""

    def __init__(self, word: str, flags: int, unknown: int, version: int | None) -> None:
        bits = [i for i in range(64) if unknown >> i & 1]
        self.word, self.flags, self.unknown_bits = word, flags, bits
        where = f" of version {version}" if version is not None else ""
        super().__init__(
            f"the {word} feature flags{where} are {flags}, with unknown bit(s) {bits} "
            f"(value {unknown}); this table was written by a newer Lance and Tessera "
            f"refuses to {'read' if word == 'reader' else 'write'} it rather than risk wrong results"
        )


class MixedNamingError(FormatError):
    """``_versions/`` holds manifests named with both the V1 and V2 schemes."""


class NamingScheme(str, Enum):
    V1 = "V1"  # _versions/{version}.manifest
    V2 = "V2"  # _versions/{u64::MAX - version:020}.manifest (newest sorts first)


def manifest_name(version: int, scheme: NamingScheme = NamingScheme.V2) -> str:
    if version < 1:
        raise ValueError(f"versions start at 1, got {version}")
    if scheme is NamingScheme.V2:
        return f"{U64_MAX - version:020d}.manifest"
    return f"{version}.manifest"


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """(version, scheme) for a manifest file name; None for anything else
    (the hint file, detached versions, staged manifests ``...manifest-{uuid}``).
    The stem is ASCII digits only (``str.isdigit`` alone accepts other scripts' digits)."""
    if not name.endswith(".manifest"):
        return None
    stem = name[:-9]
    if not (stem.isascii() and stem.isdigit()):
        return None
    if len(stem) == 20:
        return U64_MAX - int(stem), NamingScheme.V2
    return int(stem), NamingScheme.V1


def scan_versions(names: Iterable[str]) -> tuple[dict[int, str], NamingScheme | None]:
    """Versions found among the names of ``_versions/``, and the naming scheme.

    Raises :class:`MixedNamingError` when both schemes are present."""
    versions: dict[int, str] = {}
    schemes: set[NamingScheme] = set()
    for name in names:
        parsed = parse_manifest_name(name)
        if parsed is None:
            continue
        version, scheme = parsed
        if version < 1:
            continue
        versions[version] = name
        schemes.add(scheme)
    if len(schemes) > 1:
        raise MixedNamingError(
            "the table's _versions/ holds manifests named with both the V1 and V2 schemes; "
            "Tessera will not guess which is authoritative. Move one set away to repair it."
        )
    return versions, (schemes.pop() if schemes else None)


_V2_NAME_LEN = 20 + len(".manifest")


def latest_manifest(names: list[str]) -> tuple[int, str, NamingScheme] | None:
    """(version, name, scheme) of the newest manifest among the names of
    ``_versions/`` (None: none), as :func:`scan_versions` would find it
    (MixedNamingError alike), without parsing every name: V2 names are all
    29 characters long and sort newest first, so when no name can be a V1
    manifest the smallest V2-long name that parses is the latest.  Anything
    else (V1 names present) takes the full scan."""
    v2 = [n for n in names if len(n) == _V2_NAME_LEN]
    if len(v2) < len(names):  # other names too (the hint file, staged manifests): V1 ones among them?
        maybe_v1 = [n for n in names if len(n) < _V2_NAME_LEN and n.endswith(".manifest")]
    else:
        maybe_v1 = []
    if maybe_v1 and any(parse_manifest_name(n) for n in maybe_v1):
        versions, scheme = scan_versions(names)
        if not versions:
            return None
        latest = max(versions)
        assert scheme is not None  # versions were found
        return latest, versions[latest], scheme
    if not v2:
        return None
    first = min(v2)  # the newest, unless a 29-character name is no manifest: then in order
    parsed = parse_manifest_name(first)
    if parsed is not None and parsed[0] >= 1:
        return parsed[0], first, parsed[1]
    v2.sort()
    for name in v2:
        parsed = parse_manifest_name(name)
        if parsed is not None and parsed[0] >= 1:
            return parsed[0], name, parsed[1]
    return None


def versions_newer(names: list[str], version: int) -> list[int]:
    """The versions above ``version`` among the names of ``_versions/``,
    ascending, as :func:`scan_versions` would find them (MixedNamingError
    alike), parsing only the names that can be newer: a V2 name of a newer
    version sorts before ``version``'s own (fixed width, newest first).
    Anything else (V1 names present) takes the full scan."""
    maybe_v1 = [n for n in names if len(n) < _V2_NAME_LEN and n.endswith(".manifest")]
    if maybe_v1 and any(parse_manifest_name(n) for n in maybe_v1) or version < 1:
        versions, _ = scan_versions(names)
        return sorted(v for v in versions if v > version)
    cut = manifest_name(version, NamingScheme.V2)
    out = []
    for name in names:
        if len(name) == _V2_NAME_LEN and name < cut:
            parsed = parse_manifest_name(name)
            if parsed is not None and parsed[0] > version:
                out.append(parsed[0])
    out.sort()
    return out


def check_flags(manifest: table_pb2.Manifest, writing: bool) -> None:
    """Refuse manifests whose feature flags we do not understand."""
    unknown = manifest.reader_feature_flags & ~KNOWN_READER_FLAGS
    if unknown:
        raise UnknownFeatureFlagError("reader", manifest.reader_feature_flags, unknown, manifest.version)
    if writing:
        unknown = manifest.writer_feature_flags & ~KNOWN_WRITER_FLAGS
        if unknown:
            raise UnknownFeatureFlagError("writer", manifest.writer_feature_flags, unknown, manifest.version)


def compute_flags(manifest: table_pb2.Manifest, stable_row_ids: bool) -> None:
    """Set the reader/writer flags that describe ``manifest``'s content."""
    flags = 0
    if any(f.HasField("deletion_file") for f in manifest.fragments):
        flags |= FLAG_DELETION_FILES
    if stable_row_ids:
        flags |= FLAG_STABLE_ROW_IDS
    manifest.reader_feature_flags = flags
    manifest.writer_feature_flags = flags | (FLAG_TABLE_CONFIG if manifest.config else 0)


def flag_names(flags: int) -> list[str]:
    return [name for bit, name in _FLAG_NAMES.items() if flags & bit]


@dataclass
class ManifestFile:
    """A parsed manifest file: the Manifest and its inline sections."""

    manifest: table_pb2.Manifest
    transaction: transaction_pb2.Transaction | None
    index_section: bytes | None  # kept as bytes and carried forward unchanged
    #: how the file was named (from its path), so a commit on top of it need
    #: not list ``_versions/`` to learn the table's scheme; None when unknown
    naming: NamingScheme | None = None
    #: the file's size and last bytes as read (see ``commit.lineage``): proves
    #: later that the version a writer read is still the table's; None when unknown
    fingerprint: bytes | None = None

    @property
    def version(self) -> int:
        return self.manifest.version


def _section(data: memoryview, pos: int, end: int, path: str | None, what: str) -> memoryview:
    if pos < 0 or pos + 4 > end:
        raise CorruptFileError(path, f"{what} offset {pos} is outside the manifest")
    (length,) = struct.unpack_from("<I", data, pos)
    if pos + 4 + length > end:
        raise CorruptFileError(path, f"{what} of {length} bytes at {pos} runs past the manifest")
    return data[pos + 4 : pos + 4 + length]


def read_manifest(data: bytes, path: str | None = None) -> ManifestFile:
    """Parse a manifest file's bytes; every offset is checked."""
    size = len(data)
    if size < MANIFEST_FOOTER.size + 4:
        raise CorruptFileError(path, f"manifest is {size} bytes, too short to hold a footer")
    pos, _major, _minor, magic = MANIFEST_FOOTER.unpack_from(data, size - MANIFEST_FOOTER.size)
    if magic != MAGIC:
        raise CorruptFileError(path, f"manifest footer magic is {magic!r}, expected {MAGIC!r}")
    end = size - MANIFEST_FOOTER.size
    view = memoryview(data)  # sections are parsed in place, not copied out
    body = _section(view, pos, end, path, "manifest")
    if pos + 4 + len(body) != end:
        raise CorruptFileError(path, f"manifest at {pos} of {len(body)} bytes does not end at the footer ({end})")
    manifest = parse_proto(table_pb2.Manifest, body, path, "Manifest")
    txn = None
    tpos = None
    if manifest.HasField("transaction_section"):
        tpos = manifest.transaction_section
    elif manifest.HasField("transaction_section_deprecated"):
        tpos = manifest.transaction_section_deprecated
    if tpos is not None:
        txn = parse_proto(
            transaction_pb2.Transaction, _section(view, tpos, pos, path, "transaction"), path, "Transaction"
        )
    index = None
    if manifest.HasField("index_section"):
        index = bytes(_section(view, manifest.index_section, pos, path, "index section"))
        parse_proto(table_pb2.IndexSection, index, path, "IndexSection")  # validate
    _check_timestamp(manifest, path)
    parsed = parse_manifest_name(path.rsplit("/", 1)[-1]) if path else None
    return ManifestFile(manifest, txn, index, parsed[1] if parsed else None)


#: the range of a google.protobuf.Timestamp (0001-01-01 .. 9999-12-31 UTC)
_TS_MIN, _TS_MAX = -62135596800, 253402300799


def _check_timestamp(manifest: table_pb2.Manifest, path: str | None) -> None:
    ts = manifest.timestamp
    if not (_TS_MIN <= ts.seconds <= _TS_MAX and 0 <= ts.nanos < 1_000_000_000):
        raise CorruptFileError(path, f"manifest timestamp ({ts.seconds} s, {ts.nanos} ns) is outside the years 1..9999")


def check_relative_path(path: str, field: str, where: str | None = None) -> str:
    """``path`` if it is a usable relative object path (``a.lance``,
    ``dir/a.lance``), else CorruptFileError naming the manifest ``field`` it
    came from: empty, absolute, with an empty, ``.`` or ``..`` segment, or
    with a NUL byte.  The file named need not exist."""
    if not path or "\x00" in path or path.startswith("/") or any(seg in ("", ".", "..") for seg in path.split("/")):
        raise CorruptFileError(where, f"{field} {path!r} is not a relative file path inside the table")
    return path


def write_manifest(
    manifest: table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | None = None,
    index_section: bytes | None = None,
) -> bytes:
    """Serialise a manifest file, setting the section offsets in ``manifest``."""
    out = bytearray()
    manifest.ClearField("index_section")
    manifest.ClearField("transaction_section")
    manifest.ClearField("transaction_section_deprecated")
    if index_section is not None:
        manifest.index_section = len(out)
        out += struct.pack("<I", len(index_section)) + index_section
    if transaction is not None:
        tbytes = transaction.SerializeToString()
        manifest.transaction_section = len(out)
        out += struct.pack("<I", len(tbytes)) + tbytes
    pos = len(out)
    body = manifest.SerializeToString()
    out += struct.pack("<I", len(body)) + body
    out += MANIFEST_FOOTER.pack(pos, 0, 2, MAGIC)
    return bytes(out)


def read_transaction(data: bytes, path: str | None = None) -> transaction_pb2.Transaction:
    """A ``.txn`` file: a raw Transaction protobuf."""
    return parse_proto(transaction_pb2.Transaction, data, path, "Transaction")


def transaction_file_name(read_version: int, uuid: str) -> str:
    return f"{read_version}-{uuid}.txn"
