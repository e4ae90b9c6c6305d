"""The table format: a Lance dataset on disk, built on its data files (:mod:`..file`).

* :mod:`.paths` - the names inside a dataset (``_versions/``, ``_transactions/``,
  ``data/``, ``_deletions/``, ``_indices/``, ``_refs/tags/``) and the builders of
  its file paths;
* :mod:`.manifest` - manifest files, version naming and feature flags;
* :mod:`.deletion` - deletion files: which rows of a fragment are deleted;
* :mod:`.rowids` - move-stable row id sequences and row version sequences;
* :mod:`.lineage` - the row ids and versions the rows an update moves carry;
* :mod:`.store` - :class:`~.store.TableStore`, the object-store methods the
  table format calls (``tessera.stores`` implements them; nothing here imports
  the stores);
* :mod:`.fragments` - :class:`~.fragments.FragmentWriter`, the one writer of
  new fragments (``Table`` and the Spark tasks), reading a fragment's rows
  (:class:`~.fragments.FragmentReader`), the shared reader cache;
* :mod:`.write_types` - which data may be written into a table's columns;
* :mod:`.rewrite` - rewriting fragments' live rows as new fragments
  (compaction's data step);
* :mod:`.indices` - what a compaction does to each index (which follow the
  rows, which are remapped, which stop covering them);
* :mod:`.zonemap`, :mod:`.btree` - pylance's ZONEMAP index, and remapping its
  BTREE index when compaction moves rows.

Like the rest of ``tessera.format``, nothing here imports ``tessera.stores``,
``tessera.commit`` or ``tessera.catalog``.  The sub-modules are imported by
name (this package imports none of them: :mod:`.rowids` and :mod:`.deletion`
use :mod:`.paths` without loading the fragment code).
"""
