"""A Lance table on disk: the dataset's path names and its fragments.

* :mod:`.paths` - the names inside a dataset (``_versions/``, ``_transactions/``,
  ``data/``, ``_deletions/``, ``_indices/``, ``_refs/tags/``) and the builders of
  its file paths;
* :mod:`.store` - :class:`~.store.TableStore`, the object-store methods the
  table format calls (``tessera.stores`` implements them; nothing here imports
  the stores);
* :mod:`.fragments` - writing data into new fragments, reading a fragment's
  rows (:class:`~.fragments.FragmentReader`), the shared reader cache;
* :mod:`.rewrite` - rewriting fragments' live rows as new fragments
  (compaction's data step);
* :mod:`.indices` - what a compaction does to each index (which follow the
  rows, which are remapped, which stop covering them);
* :mod:`.lineage` - the row ids and versions the rows an update moves carry.

Like the rest of ``tessera.format``, nothing here imports ``tessera.stores``,
``tessera.commit`` or ``tessera.catalog``.  The sub-modules are imported by
name (this package imports none of them: ``format.rowids`` and
``format.deletion`` use :mod:`.paths` without loading the fragment code).
"""
