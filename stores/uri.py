"""A table's URI, parsed once: every module that needs a table's scheme,
bucket, key prefix, local path or manifest-store key reads it from the
:class:`TableURI` :func:`parse_table_uri` makes.

Accepted: a local path (relative paths become absolute), ``file:///abs``
(``file://localhost/abs``), ``s3://bucket/prefix`` (``s3a://`` is the same
table), ``gs://bucket/prefix``, ``az://container/prefix`` (the account from
``storage_options``) and ``abfs://container@account.dfs.core.windows.net/prefix``
(``abfss://`` is the same table; the account from the host).  Anything else, or a malformed URI, is
InvalidURIError.  S3 URIs follow AWS's bucket naming rule and may carry no
credentials, query or fragment: settings go in ``storage_options``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .errors import InvalidURIError

#: AWS's bucket naming rule, plus ``_`` for legacy us-east-1 buckets
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_BAD_KEY_CHARS = re.compile(r"[\x00-\x1f\x7f\\{}^%`\[\]\"<>~#|]")
#: object-store schemes besides s3 (``abfss`` is folded into ``abfs``)
_OTHER_CLOUDS = ("gs", "az", "abfs", "abfss")


@dataclass(frozen=True)
class TableURI:
    """A parsed table location."""

    #: ``"file"`` for a local path, ``"s3"`` (``s3a`` folded into it), ``"gs"``, ``"az"`` or ``"abfs"``
    #: (``abfss`` folded into it)
    scheme: str
    #: the bucket (``""`` for a local path)
    bucket: str
    #: a local path: the absolute path; otherwise the key prefix (``"a/b"``: no empty segments,
    #: no leading or trailing ``/``; ``""`` for a bucket's root)
    path: str
    #: the URI as given
    given: str
    #: ``abfs://container@HOST/...``: the account's host (``account.dfs.core.windows.net``); else ``""``
    host: str = ""

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def key(self) -> str:
        """The table's key in a manifest store: scheme, bucket and path, no
        trailing slash, no query or credentials (``file:///abs/path`` for a
        local table, ``s3://bucket/a/b`` for ``s3a://bucket//a/b/``)."""
        if self.is_local:
            return "file://" + self.path.rstrip("/")
        bucket = f"{self.bucket}@{self.host}" if self.host else self.bucket
        return f"{self.scheme}://{bucket}/{self.path}" if self.path else f"{self.scheme}://{bucket}"

    @property
    def root(self) -> str:
        """The table root as Lance namespaces name objects: relative to the
        object store's root (no scheme, no leading ``/``; the key prefix in a
        bucket)."""
        if self.is_local:
            return self.path.replace("\\", "/").lstrip("/")
        return self.path


def parse_table_uri(uri: Any) -> TableURI:
    """``uri`` (a string or an ``os.PathLike``) as a :class:`TableURI`; InvalidURIError when it is not one."""
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidURIError(f"table URI must be a string, got {type(uri).__name__}")
    uri = os.fspath(uri)
    if not isinstance(uri, str):
        raise InvalidURIError(f"table URI must be a string, got {type(uri).__name__}")
    if not uri.strip():
        raise InvalidURIError("table URI is empty")
    if "\x00" in uri:
        raise InvalidURIError(f"table URI {uri!r} contains a NUL byte")
    path = local_path(uri)
    if path is not None:
        return TableURI("file", "", path, uri)
    p = urlparse(uri)
    scheme = p.scheme.lower()
    if scheme in ("s3", "s3a"):
        return _parse_s3(uri, p)
    if scheme in _OTHER_CLOUDS:
        return _parse_cloud(uri, p, scheme)
    raise InvalidURIError(f"unsupported table URI scheme {scheme!r} in {uri!r}")


def local_path(uri: str) -> str | None:
    """The absolute path a local table URI (a path, ``file:///abs``, ``file:/abs``)
    names; None for the URI of an object store."""
    p = urlparse(uri)
    scheme = p.scheme.lower()
    if not (scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")):
        return None
    if scheme == "file" and p.netloc not in ("", "localhost"):
        raise InvalidURIError(f"file URI {uri!r} names host {p.netloc!r}; use file:///absolute/path")
    return os.path.abspath(p.path if scheme == "file" else uri)


def _parse_s3(uri: str, p: Any) -> TableURI:
    if p.query or p.fragment or p.params:
        raise InvalidURIError(
            f"S3 table URI {uri!r} must not have a query or fragment; pass settings as storage_options"
        )
    if "@" in p.netloc:
        raise InvalidURIError(f"S3 table URI {uri!r} must not carry credentials; pass them as storage_options")
    bucket = p.netloc
    if not bucket:
        raise InvalidURIError(f"S3 table URI {uri!r} names no bucket; use s3://bucket/path")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise InvalidURIError(
            f"{bucket!r} in {uri!r} is not a valid bucket name (3-63 lower-case letters, digits, '.', '-')"
        )
    parts = [s for s in p.path.split("/") if s]
    for s in parts:
        if s in (".", "..") or _BAD_KEY_CHARS.search(s):
            raise InvalidURIError(f"S3 table URI {uri!r} has an unusable path segment {s!r}")
    return TableURI("s3", bucket, "/".join(parts), uri)


def _parse_cloud(uri: str, p: Any, scheme: str) -> TableURI:
    if p.query or p.fragment or p.params:
        raise InvalidURIError(f"table URI {uri!r} must not have a query or fragment; pass settings as storage_options")
    if not p.netloc:
        raise InvalidURIError(f"table URI {uri!r} has no bucket")
    host = ""
    bucket = p.netloc
    if scheme in ("abfs", "abfss"):
        scheme = "abfs"
        container, at, host = p.netloc.rpartition("@")
        if not at or not container or not host or ":" in container:
            raise InvalidURIError(
                f"table URI {uri!r}: use abfs://container@account.dfs.core.windows.net/path "
                f"(or az://container/path with the account in storage_options)"
            )
        bucket, host = container, host.lower()
    elif "@" in p.netloc or ":" in p.netloc:
        raise InvalidURIError(f"table URI {uri!r} must not carry credentials or a port; use storage_options")
    parts = [s for s in p.path.split("/") if s]
    for s in parts:
        if s in (".", "..") or _BAD_KEY_CHARS.search(s):
            raise InvalidURIError(f"table URI {uri!r} has an unusable path segment {s!r}")
    return TableURI(scheme, bucket, "/".join(parts), uri, host)


def normalize_table_uri(uri: Any) -> str:
    """The key of a table in a manifest store (:attr:`TableURI.key`)."""
    return parse_table_uri(uri).key


def parse_s3_uri(uri: Any) -> tuple[str, str]:
    """``s3://bucket/a/b/`` (or ``s3a://``) -> ``("bucket", "a/b")``; InvalidURIError for any other URI."""
    loc = parse_table_uri(uri)
    if loc.scheme != "s3":
        raise InvalidURIError(f"{loc.given!r} is not an s3:// URI")
    return loc.bucket, loc.path
