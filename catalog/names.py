"""Table names versus table paths: the one rule every entry point follows.

A string that names a table is read as a **location** (a path or URI) when it
is one unmistakably:

* a URI: it has a scheme (``s3://bucket/t``, ``file:///data/t``, ``file:/data/t``);
* an absolute path (``/data/t``);
* an explicit relative path: it contains a path separator (``warehouse/events``,
  ``./t2``, ``../x/t``), or is ``.`` or ``..``.

Anything else — a bare name such as ``ns.t2`` or ``t2`` — is a **table name**.
A table name is looked up in the catalog or namespace the caller names
(``tessera.connect(...).load_table``, ``Table.open(name, namespace=...)``,
the Spark options ``warehouse``/``catalog``/``namespace``, the CLI's
``--warehouse``/``--catalog``/``--config-name``); with none named it is
refused with :class:`~tessera.catalog.errors.TableNameError`, whose message
says how to write it as a folder (``./ns.t2``) or how to name a catalog.
A bare name is never quietly turned into a folder of the working directory.

``os.PathLike`` objects (``pathlib.Path("t2")``) are paths by their type.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from .errors import TableNameError

__all__ = ["bare_name_error", "check_location", "is_table_name"]


def is_table_name(text: str | os.PathLike[str]) -> bool:
    """True when ``text`` is a bare table name rather than a path or URI (see the module docs)."""
    if not isinstance(text, str):
        return False  # a PathLike is a path
    if text in (".", ".."):
        return False
    scheme = urlparse(text).scheme
    if len(scheme) > 1 or (len(scheme) == 1 and os.name == "nt"):
        return False
    if os.path.isabs(text):
        return False
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return not any(s in text for s in separators)


def bare_name_error(name: str, *, catalog_hint: str, folder_hint: str | None = None) -> TableNameError:
    """The error for a bare name with no catalog to resolve it in.

    ``catalog_hint`` says how the caller's entry point names a catalog (or a
    namespace); ``{name}`` in it becomes the quoted name.  ``folder_hint``
    says how to write the folder instead (default: the name with ``./`` in
    front)."""
    folder = folder_hint or repr(f"./{name}")
    return TableNameError(
        f"{name!r} is a table name, not a path: nothing names a catalog to look it up in. "
        f"For a table in a catalog, {catalog_hint.format(name=repr(name))}; "
        f"for a folder in the working directory, write {folder} "
        "(or give an absolute path or a URI such as s3://bucket/table). "
        "Bare names are never taken as folders."
    )


def check_location(uri: str | os.PathLike[str], *, catalog_hint: str) -> None:
    """Refuse ``uri`` when it is a bare table name (TableNameError); paths and URIs pass."""
    if isinstance(uri, str) and not uri.strip():
        return  # the object store says what is wrong with an empty URI
    if is_table_name(uri):
        raise bare_name_error(str(uri), catalog_hint=catalog_hint)
