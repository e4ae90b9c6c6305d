"""One SparkSession for the whole test run (``local[2,2]``: 2 cores, a failed
task is retried once), tuned for start-up time: C1-only JIT, serial GC, no UI,
quiet logs.  Under pytest-xdist a session is per worker process; README's
``--dist loadfile`` runs every Spark test in one worker (``tests/conftest.py``),
so one JVM is started.  Without Java or pyspark the Spark tests are skipped — except with
``CI=true``, where they fail."""

from __future__ import annotations

import os
import sys

import pytest
from tessera_test_services import IN_CI, java_available, unavailable  # loaded by tests/conftest.py

MASTER = "local[2,2]"


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: needs Java and pyspark (one shared local SparkSession)")


def spark_env() -> dict[str, str]:
    """Environment a Spark JVM (and its Python workers) needs for these tests."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TZ": "UTC",
    }


def spark_conf(tmp: str) -> dict[str, str]:
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": os.path.join(tmp, "warehouse"),
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Duser.timezone=UTC",
        "spark.python.worker.faulthandler.enabled": "true",
    }


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The shared SparkSession, with the tessera source registered and its
    Python workers warmed up (one small write and read)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        unavailable("pyspark", str(exc))
    if not java_available():
        unavailable("Java (java -version)", "not on PATH")
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from tessera.catalog import spark as tspark

    tmp = str(tmp_path_factory.mktemp("spark"))
    builder = SparkSession.builder.master(MASTER).appName("tessera-tests")
    for k, v in spark_conf(tmp).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    tspark.register(session)
    warm = os.path.join(tmp, "warmup")
    session.range(10).write.format("tessera").mode("append").save(warm)
    assert session.read.format("tessera").load(warm).filter("id > 4").count() == 5
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pushdown_probe(spark) -> str:
    """The format name of a ``tessera`` source with filter pushdown on and its
    refusal (:func:`tessera.tspark.pushdown_refusal`) bypassed, to test
    the pushdown machinery itself.  PySpark 4.3 reuses a DataFrame's pushed
    read plan for its later queries, so load a fresh DataFrame for every query
    (as the refusal's reason says)."""
    from tessera.catalog.spark import PUSHDOWN_CONF, TesseraDataSource

    parallelism = spark.sparkContext.defaultParallelism

    class PushdownProbe(TesseraDataSource):  # defined in a function: Spark pickles it by value
        pushdown_default = True
        default_parallelism = parallelism

        @classmethod
        def name(cls) -> str:
            return "tessera_pushdown_probe"

        def _pushdown_refusal(self):
            return None

    spark.dataSource.register(PushdownProbe)
    spark.conf.set(PUSHDOWN_CONF, "true")  # a reader with pushFilters fails without it
    return PushdownProbe.name()


@pytest.fixture(scope="session")
def spark_job_env() -> dict[str, str]:
    """Environment for a ``spark-submit`` subprocess (skips/fails like ``spark``)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        unavailable("pyspark", str(exc))
    if not java_available():
        unavailable("Java (java -version)", "not on PATH")
    return spark_env()


@pytest.fixture()
def table_uri(tmp_path):
    return str(tmp_path / "t")


__all__ = ["IN_CI", "MASTER", "spark_conf", "spark_env"]
