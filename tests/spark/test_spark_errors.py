"""Tessera's errors as a Spark job reports them (catalog/spark/errors.py): the
first line of ``str(exc)`` names the Tessera error and its message, for errors
raised while Spark plans a read or a write, in a task and in the job's commit,
and the exception is an instance of the Tessera class as well as of PySpark's.

Before (PySpark 4.3.0, no translation), the first lines were Spark's heading
and the worker's traceback::

    [PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most recent call last):
      File ".../catalog/spark/__init__.py", line 336, in schema
    ...
    An exception was thrown from the Python worker:
    Traceback (most recent call last):
"""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import (
    ReplaceWhereMismatchError,
    SchemaMismatchError,
    SparkOptionError,
    SparkWriteError,
    TableNotFoundError,
    TesseraError,
)
from tessera.catalog.spark import errors as spark_errors
from tessera.catalog.spark import unwrap
from tessera.stores.errors import ObjectNotFoundError

pytestmark = pytest.mark.spark

SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0]


def check_spark_error(exc: BaseException, condition: str) -> None:
    """Still PySpark's exception, with Spark's own text after the first line
    and no worker traceback (a Tessera error's is dropped in the worker)."""
    from pyspark.errors import AnalysisException, PythonException

    assert isinstance(exc, AnalysisException if condition == "PYTHON_DATA_SOURCE_ERROR" else PythonException)
    assert exc.getCondition() == condition
    text = str(exc)
    assert "Traceback (most recent call last)" not in text, text
    heading = "[PYTHON_DATA_SOURCE_ERROR] Failed to" if condition == "PYTHON_DATA_SOURCE_ERROR" else "An exception"
    assert text.splitlines()[1].startswith(heading), text


@pytest.fixture()
def table(spark, table_uri) -> str:
    spark.range(10).write.format("tessera").mode("append").save(table_uri)
    return table_uri


def test_read_planning_error_names_the_tessera_error_first(spark, table):
    """schema() in a planning worker: an unknown option."""
    with pytest.raises(SparkOptionError) as info:
        spark.read.format("tessera").option("verison", "1").load(table)
    assert first_line(info.value).startswith(
        "tessera.errors.SparkOptionError: unknown option 'verison' for a tessera read. Did you mean 'version'?"
    )
    check_spark_error(info.value, "PYTHON_DATA_SOURCE_ERROR")


def test_missing_table_names_the_tessera_error_first(spark, tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(TableNotFoundError) as info:
        spark.read.format("tessera").load(missing)
    assert first_line(info.value) == (
        f"tessera.errors.TableNotFoundError: no Lance table at {missing} (no manifests under _versions/)"
    )
    assert isinstance(info.value, FileNotFoundError)  # as TableNotFoundError is
    check_spark_error(info.value, "PYTHON_DATA_SOURCE_ERROR")


def test_write_planning_error_names_the_tessera_error_first(spark, table):
    """writer() in a planning worker: an append whose column types differ."""
    with pytest.raises(SchemaMismatchError) as info:
        spark.range(3).selectExpr("cast(id as string) as id").write.format("tessera").mode("append").save(table)
    assert first_line(info.value).startswith(
        "tessera.errors.SchemaMismatchError: cannot write the DataFrame into the table: column 'id' is string"
    )
    check_spark_error(info.value, "PYTHON_DATA_SOURCE_ERROR")


def test_write_task_error_names_the_tessera_error_first(spark, table):
    """write() in an executor task: a row replaceWhere does not match."""
    with pytest.raises(ReplaceWhereMismatchError) as info:
        spark.range(50).write.format("tessera").mode("overwrite").option("replaceWhere", "id < 10").save(table)
    assert first_line(info.value).startswith(
        "tessera.errors.ReplaceWhereMismatchError: Data written out does not match replaceWhere 'id < 10'"
    )
    check_spark_error(info.value, "PYTHON_EXCEPTION")
    assert spark.read.format("tessera").load(table).count() == 10  # nothing committed


def test_read_task_error_names_the_tessera_error_first(spark, table):
    """read() in an executor task: a data file gone since the read was planned."""
    df = spark.read.format("tessera").load(table)
    for path in glob.glob(os.path.join(table, "data", "*")):
        os.remove(path)
    with pytest.raises(ObjectNotFoundError) as info:
        df.count()
    assert first_line(info.value).startswith(f"tessera.errors.ObjectNotFoundError: {table}/data/")
    assert first_line(info.value).endswith(".lance does not exist")
    check_spark_error(info.value, "PYTHON_EXCEPTION")


def test_commit_error_names_the_tessera_error_first(spark, tmp_path):
    """commit() in the driver's commit worker: the table was created by
    another writer, with another schema, while the job ran (its only task
    creates it)."""
    uri = str(tmp_path / "raced")

    def create_meanwhile(batches):  # a local function: Spark pickles it by value
        Table.create(uri, pa.table({"other": pa.array(["x"])}))
        yield from batches

    df = spark.range(5).repartition(1).mapInArrow(create_meanwhile, "id long")
    with pytest.raises(SparkWriteError) as info:
        df.write.format("tessera").mode("append").save(uri)
    assert first_line(info.value) == (
        f"tessera.errors.SparkWriteError: {uri} was created by another writer while this job ran, with a different "
        "schema or file version; the job's files are removed. Run the job again to append to the new table."
    )
    check_spark_error(info.value, "PYTHON_DATA_SOURCE_ERROR")
    assert "Failed to commit or abort Python data source write" in str(info.value)
    assert Table.open(uri).schema.names == ["other"]


def test_spark_text_follows_without_repeating_the_message(spark, table):
    """Spark's heading, the worker's class and the SQLSTATE stay; the message is said once."""
    with pytest.raises(SparkOptionError) as info:
        spark.read.format("tessera").option("verison", "1").load(table)
    assert str(info.value).splitlines()[1:] == [
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
        "tessera.catalog.errors.SparkOptionError (the message above)",
        " SQLSTATE: 38000",
    ]
    assert str(info.value).count("Did you mean 'version'?") == 1


def test_full_worker_traceback_with_simplified_tracebacks_off(spark, table):
    """Spark's setting for full worker tracebacks keeps a Tessera error's
    traceback too, after the first line."""
    spark.conf.set(SIMPLIFIED_TRACEBACK, "false")
    try:
        with pytest.raises(SparkOptionError) as info:
            spark.read.format("tessera").option("verison", "1").load(table)
    finally:
        spark.conf.unset(SIMPLIFIED_TRACEBACK)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("tessera.errors.SparkOptionError: unknown option 'verison'")
    assert lines[1].endswith("Failed to create Python data source instance: Traceback (most recent call last):")
    assert any(line.strip().startswith('File "') and line.strip().endswith("in schema") for line in lines)


def test_errors_that_are_not_tessera_are_left_as_spark_made_them(spark, table):
    from pyspark.errors.exceptions.captured import AnalysisException

    with pytest.raises(AnalysisException) as info:
        spark.range(3).write.format("tessera").save(table)  # no mode(): Spark refuses errorifexists itself
    assert type(info.value) is AnalysisException
    assert first_line(info.value).startswith("[UNSUPPORTED_DATA_SOURCE_SAVE_MODE]")
    assert unwrap(info.value) is None
    assert not isinstance(info.value, TesseraError)


def test_unwrap_rebuilds_the_tessera_error(spark, table):
    """With or without the driver's translation (register(translate_errors=False))."""
    from pyspark.errors.exceptions.captured import AnalysisException

    with pytest.raises(SparkOptionError) as info:
        spark.read.format("tessera").option("verison", "1").load(table)
    err = unwrap(info.value)
    assert type(err) is SparkOptionError
    assert str(err) == first_line(info.value).removeprefix("tessera.errors.SparkOptionError: ")

    spark_errors.uninstall()
    try:
        with pytest.raises(AnalysisException) as raw:
            spark.read.format("tessera").option("verison", "1").load(table)
    finally:
        spark_errors.install()
    assert type(raw.value) is AnalysisException
    assert first_line(raw.value).startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: ")
    err = unwrap(raw.value)
    assert type(err) is SparkOptionError and err.__cause__ is raw.value
    assert str(err) == str(unwrap(info.value))


def test_install_is_idempotent_and_uninstall_restores():
    from pyspark.errors.exceptions import captured

    assert spark_errors.install()
    wrapped = captured.convert_exception
    assert spark_errors.install() and captured.convert_exception is wrapped
    spark_errors.uninstall()
    try:
        assert getattr(captured.convert_exception, "_tessera_wraps", None) is None
    finally:
        spark_errors.install()


# -- the text Spark gives: parsed without a session ---------------------------------------------


def test_find_error_in_spark_texts():
    find = spark_errors.find_error
    planning = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most recent call last):\n"
        '  File "/x/catalog/spark/__init__.py", line 336, in schema\n'
        "    opts = self.read_options()\n"
        "tessera.catalog.errors.SparkOptionError: unknown option 'verison'\n"
        " SQLSTATE: 38000"
    )
    found = find(planning)
    assert found == spark_errors.FoundError(
        SparkOptionError, "unknown option 'verison'", "tessera.catalog.errors.SparkOptionError"
    )
    assert found.name == "tessera.errors.SparkOptionError"
    hidden = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to ...: tessera.format.errors.SchemaMismatchError: bad\nmore SQLSTATE: 38000"
    )
    assert find(hidden) == spark_errors.FoundError(
        SchemaMismatchError, "bad\nmore", "tessera.format.errors.SchemaMismatchError"
    )
    py4j = (
        "An error occurred while calling o62.save.\n: org.apache.spark.SparkException: aborted\n"
        'Traceback (most recent call last):\n  File "w.py", line 1, in write\n'
        "tessera.commit.errors.CommitConflictError: version 3 was committed by another writer\n\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:1)\n"
    )
    assert find(py4j).message == "version 3 was committed by another writer"
    jvm = planning.replace(
        " SQLSTATE: 38000", " SQLSTATE: 38000\n\nJVM stacktrace:\norg...: tessera.x.Y: z\n\tat a.b(c)"
    )
    assert find(jvm).message == "unknown option 'verison'"


def test_find_error_only_when_a_tessera_error_is_the_last_one():
    find = spark_errors.find_error
    chained = (
        'Traceback (most recent call last):\n  File "x", line 1\ntessera.format.errors.SchemaMismatchError: a\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "x", line 2\nValueError: b'
    )
    assert find(chained) is None
    assert (
        find("Traceback (most recent call last):\n    except tessera.errors.SchemaMismatchError:\nValueError: x")
        is None
    )
    assert find("tessera.nosuchmodule.SomeError: x") is None  # nothing imported on the text's word
    assert find("tessera.catalog.errors.TesseraErrorz: x") is None
    assert find('[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] The data source "tessera" cannot be written') is None


def test_unwrap_rebuilds_classes_whose_constructor_takes_other_arguments():
    from tessera.commit.errors import CommitConflictError

    class FakeSparkError(Exception):
        pass

    spark_exc = FakeSparkError(
        "An exception was thrown from the Python worker:\n"
        "tessera.commit.errors.CommitConflictError: version 3 was committed by another writer: theirs"
    )
    err = unwrap(spark_exc)
    assert type(err) is CommitConflictError and err.__cause__ is spark_exc
    assert str(err) == "version 3 was committed by another writer: theirs"
    assert unwrap(err) is err
    assert unwrap(FakeSparkError("boom")) is None


def test_reported_hides_the_traceback_only_in_a_spark_worker(monkeypatch):
    """In the user's process the variable would reach Python workers started
    later (and hide every UDF's traceback): it is set only inside a worker."""

    @spark_errors.reported
    def fails():
        raise SparkOptionError("bad")

    @spark_errors.reported
    def yields():
        yield 1
        raise SparkOptionError("bad")

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME", raising=False)
    monkeypatch.setenv("SPARK_SIMPLIFIED_TRACEBACK", "1")
    with pytest.raises(SparkOptionError):
        fails()
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
    monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
    assert next(gen := yields()) == 1
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
    with pytest.raises(SparkOptionError):
        next(gen)
    assert os.environ["SPARK_HIDE_TRACEBACK"] == "1"
    monkeypatch.delenv("SPARK_HIDE_TRACEBACK")
    monkeypatch.delenv("SPARK_SIMPLIFIED_TRACEBACK")  # spark...simplifiedTraceback.enabled=false: keep it
    with pytest.raises(SparkOptionError):
        fails()
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
    monkeypatch.setenv("SPARK_SIMPLIFIED_TRACEBACK", "1")
    with pytest.raises(ValueError):  # not a Tessera error: always its traceback
        spark_errors.reported(lambda: int("x"))()
