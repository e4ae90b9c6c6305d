"""Tessera as a Lance Namespace: pylance and LanceDB commit through Tessera.

``TesseraNamespace`` is a :class:`lance_namespace.LanceNamespace` over a
Tessera catalog: namespaces and tables are the catalog's, every table has
*managed versioning*, so pylance sends each commit here as
``create_table_version``.  pylance writes the manifest to a staged name
(``_versions/{final}.manifest-{uuid}``); the namespace validates it, wins the
version through the table's own coordinator (the native put-if-not-exists of
the final name, or the external store's reserve, publish and flip), removes
the staged file and returns the final path: one protocol for pylance,
LanceDB, Tessera's Python writers and Spark.

Connect with ``lance_namespace.connect("tessera", {"warehouse": DIR})``
(after ``import tessera.catalog.namespace``) or by the class path
``tessera.catalog.namespace.TesseraNamespace`` without any import; the
properties are ``tessera.connect``'s: ``name`` (a configured catalog),
``warehouse``, ``uri`` (the catalog database), ``storage.<key>`` (object
store options), ``commit.retry.*``, plus ``root_namespace`` (where one-part
table ids live, default ``default``) and ``vend_storage_options``
(``true`` to hand the storage options to clients in ``describe_table``) and
``commit_store`` (the coordinator of the tables it declares, as in
``Catalog.create_table``: ``auto``, ``native``, ``catalog`` or a store URL).

Answers pylance depends on (see ``docs/reference/namespace-commits.md``):
``describe_table_version`` is read-your-writes consistent (it reads the
coordinator), a version already taken is ``ConcurrentModificationError``,
and a re-sent commit of the same manifest succeeds.

The package's modules, one job each:

- :mod:`.plugin`: ``TesseraNamespace``, the namespace operations;
- :mod:`.tables`: one table's object store and coordinator for a request;
- :mod:`.versions`: managed versioning (list, describe, ``create_table_version``
  as request -> ``tessera.commit.accept_staged`` -> response);
- :mod:`.rollback`: a refused first commit leaves nothing behind;
- :mod:`.translate`: Tessera's errors as the namespace's;
- :mod:`.parsing`: a request's id parts, model and page;
- :mod:`.routes` and :mod:`.server`: the REST server (``tessera serve``).
"""

from __future__ import annotations

import lance_namespace

from .plugin import TesseraNamespace

__all__ = ["TesseraNamespace", "register"]

SHORT_NAME = "tessera"
CLASS_PATH = "tessera.catalog.namespace.TesseraNamespace"


def register() -> None:
    """Make ``lance_namespace.connect("tessera", ...)`` build a TesseraNamespace."""
    lance_namespace.register_namespace_impl(SHORT_NAME, CLASS_PATH)


register()
