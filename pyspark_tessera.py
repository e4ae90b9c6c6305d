"""Zero-configuration registration of the ``tessera`` Spark data source.

PySpark (4.0+) imports every top-level module named ``pyspark_*`` on its
workers' path, once per JVM, and registers the ``DefaultSource`` it defines
under ``DefaultSource.name()``.  With Tessera installed (``pip install``),
``spark.read.format("tessera")`` therefore works without calling
:func:`tessera.catalog.spark.register`; call it anyway to turn on filter pushdown
by default and to plan reads for the session's parallelism.  (In an
editable install, pip maps packages through an import hook that PySpark's
module scan does not see; there, call ``register``.)
"""

from tessera.catalog.spark import TesseraDataSource as DefaultSource

__all__ = ["DefaultSource"]
