"""Zero-configuration registration of the ``tessera`` Spark data source.

PySpark (4.0+) imports every top-level module named ``pyspark_*`` on its
workers' path, once per JVM, and registers the ``DefaultSource`` it defines
under ``DefaultSource.name()``.  With Tessera installed (``pip install``),
``spark.read.format("tessera")`` therefore works without calling
:func:`tessera.catalog.spark.register`; call it anyway to plan reads for
the session's parallelism and to lift Spark's per-row Arrow byte accounting
on writes.  Filter pushdown stays off either way: it is refused where
PySpark would reuse a pushed-down read plan for other queries (see
:func:`tessera.catalog.spark.pushdown_refusal`).  (In an
editable install, pip maps packages through an import hook that PySpark's
module scan does not see; there, call ``register``.)
"""

from tessera.catalog.spark import TesseraDataSource as DefaultSource

__all__ = ["DefaultSource"]
