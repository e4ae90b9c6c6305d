"""Filter pushdown never changes an answer: the same queries on one reused
DataFrame give what pyarrow computes from the written data, or the read is
refused with a typed error.

PySpark 4.3 (and, from the same Spark change, 4.1 and 4.2) keeps the read
plan that a query's filter pushdown produced on the *DataFrame's* data source
object in the JVM and reuses it for every later query of that DataFrame (and
for the other scans of it in the same query), so ``df.where(...).count()``
followed by ``df.count()`` counted the filtered rows.  See
:func:`tessera.catalog.spark.pushdown_refusal`."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pyspark
import pytest

from tessera.catalog import Table
from tessera.catalog import spark as tspark
from tessera.catalog.errors import SparkOptionError

pytestmark = pytest.mark.spark

DAYS = [dt.date(2024, 3, d) for d in range(1, 6)]
EVENTS = ["view", "click", "cart", "purchase", "search"]
P, V = "event_type = 'purchase'", "event_type = 'view'"
ROWS_PER_FRAGMENT, FRAGMENTS = 8_000, 5


def _fragment(i: int) -> pa.Table:
    ids = pa.array(range(i * ROWS_PER_FRAGMENT, (i + 1) * ROWS_PER_FRAGMENT), pa.int64())
    n = ids.to_numpy()
    return pa.table(
        {
            "id": ids,
            "day": pa.array([DAYS[(k // 3 + i) % 5] for k in n.tolist()], pa.date32()),
            # uneven: purchases and views are rarer than the rest, and differ by day
            "event_type": pa.array([EVENTS[(k * k + k // 7) % 5] for k in n.tolist()]),
            "amount": pa.array((n % 97) * 1.25),
        }
    )


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> tuple[str, pa.Table]:
    """A Tessera table of 40,000 rows in 5 fragments, and the same rows as a pyarrow table."""
    uri = str(tmp_path_factory.mktemp("pushdown") / "events")
    parts = [_fragment(i) for i in range(FRAGMENTS)]
    t = Table.create(uri, parts[0])
    for p in parts[1:]:
        t = t.append(p)
    assert len(Table.open(uri).fragments) == FRAGMENTS
    return uri, pa.concat_tables(parts)


def _by_day(rows) -> dict:
    return {r[0]: r[1] for r in rows}


def _answers(df) -> dict:
    """The bug report's sequence and more reuse of one DataFrame, in this order."""
    out = {}
    out["count"] = df.count()
    out["purchases"] = df.where(P).count()
    out["count after a filter"] = df.count()
    out["per day"] = _by_day(df.groupBy("day").count().collect())
    out["purchases per day"] = _by_day(df.where(P).groupBy("day").count().collect())
    out["views"] = df.where(V).count()  # a second, different filter
    out["count after two filters"] = df.count()
    out["not pushable after a filter"] = df.where("id % 3 = 0").count()
    out["filtered union unfiltered"] = df.where(P).unionByName(df).count()
    out["two filters in one plan"] = df.where(P).unionByName(df.where(V)).count()
    joined = df.where(P).groupBy("day").count().withColumnRenamed("count", "p").join(df.groupBy("day").count(), "day")
    out["filtered join unfiltered"] = {r.day: (r.p, r["count"]) for r in joined.collect()}
    cached = df.where(P).cache()
    try:
        out["cached purchases"] = cached.count()
        out["count next to a cache"] = df.count()
        out["cached per day"] = _by_day(cached.groupBy("day").count().collect())
    finally:
        cached.unpersist()
    return out


def _expected(data: pa.Table) -> dict:
    """The same answers, computed by pyarrow from the rows that were written."""

    def per_day(t: pa.Table) -> dict:
        return {r["day"]: r["day_count"] for r in t.group_by("day").aggregate([("day", "count")]).to_pylist()}

    purchases = data.filter(pc.field("event_type") == "purchase")
    views = data.filter(pc.field("event_type") == "view")
    n, np_ = data.num_rows, purchases.num_rows
    by_day, p_by_day = per_day(data), per_day(purchases)
    return {
        "count": n,
        "purchases": np_,
        "count after a filter": n,
        "per day": by_day,
        "purchases per day": p_by_day,
        "views": views.num_rows,
        "count after two filters": n,
        "not pushable after a filter": int((data["id"].to_numpy() % 3 == 0).sum()),
        "filtered union unfiltered": np_ + n,
        "two filters in one plan": np_ + views.num_rows,
        "filtered join unfiltered": {d: (p_by_day[d], by_day[d]) for d in p_by_day},
        "cached purchases": np_,
        "count next to a cache": n,
        "cached per day": p_by_day,
    }


def _outcome(make_df) -> dict | str:
    """The answers of the DataFrame ``make_df()`` builds, or ``"refused"`` when
    Tessera refused filter pushdown with its typed error."""
    try:
        df = make_df()
        return _answers(df)
    except Exception as exc:  # raised in a planning worker, it reaches us wrapped by Spark
        if "SparkOptionError" in str(exc) and "pushdown" in str(exc):
            return "refused"
        raise


@pytest.fixture()
def filter_pushdown_conf(spark, request):
    """Run with ``spark.sql.python.filterPushdown.enabled`` as parametrized, then restore it."""
    before = spark.conf.get(tspark.PUSHDOWN_CONF, None)
    spark.conf.set(tspark.PUSHDOWN_CONF, request.param)
    yield request.param
    if before is None:
        spark.conf.unset(tspark.PUSHDOWN_CONF)
    else:
        spark.conf.set(tspark.PUSHDOWN_CONF, before)


def test_the_data_and_pyarrows_answers(events):
    uri, data = events
    want = _expected(data)
    assert Table.open(uri).count_rows() == want["count"] == 40_000
    assert 0 < want["purchases"] < want["count"] // 3 and want["purchases"] != want["views"]
    assert len(set(want["purchases per day"].values())) > 1  # a wrong filter cannot hide in equal counts


@pytest.mark.parametrize("filter_pushdown_conf", ["true", "false"], indirect=True)
def test_reused_dataframe_without_pushdown_matches_pyarrow(spark, events, filter_pushdown_conf):
    uri, data = events
    assert _answers(spark.read.format("tessera").load(uri)) == _expected(data)


@pytest.mark.parametrize("filter_pushdown_conf", ["true"], indirect=True)
def test_asking_for_pushdown_never_gives_a_wrong_answer(spark, events, filter_pushdown_conf):
    uri, data = events
    want = _expected(data)

    def by_option():
        return spark.read.format("tessera").option("pushdown", "true").load(uri)

    def by_view():
        spark.sql(
            f"CREATE OR REPLACE TEMPORARY VIEW pushdown_events USING tessera OPTIONS (path '{uri}', pushdown 'true')"
        )
        return spark.table("pushdown_events")

    outcomes = {"option": _outcome(by_option), "temporary view": _outcome(by_view)}
    try:
        tspark.register(spark, pushdown=True)  # pushdown on by default for every read of the session
    except SparkOptionError as exc:
        assert "pushdown" in str(exc)
        outcomes["register(pushdown=True)"] = "refused"
    else:
        outcomes["register(pushdown=True)"] = _outcome(lambda: spark.read.format("tessera").load(uri))
    finally:
        tspark.register(spark)  # the session's usual registration, for the other tests
    for route, got in outcomes.items():
        assert got == "refused" or got == want, route

    refusal = tspark.pushdown_refusal(pyspark.__version__)
    assert (refusal is not None) == all(got == "refused" for got in outcomes.values()), (refusal, outcomes)
    with pytest.raises(Exception, match="SparkOptionError.*option pushdown must be true or false"):
        spark.read.format("tessera").option("pushdown", "yes").load(uri)
    # refusing changed nothing for reads without pushdown
    assert spark.read.format("tessera").option("pushdown", "false").load(uri).where(P).count() == want["purchases"]
    assert spark.read.format("tessera").load(uri).count() == want["count"]


def test_this_pyspark_still_needs_the_refusal(spark, events, pushdown_probe):
    """Canary: pushdown with the refusal bypassed.  On a PySpark that
    :func:`pushdown_refusal` refuses, the JVM must still reuse the pushed plan
    (the day it does not, check that release and move ``PUSHDOWN_SAFE_SINCE``);
    on one it allows, every answer must be right."""
    uri, data = events
    want = _expected(data)
    got = _answers(spark.read.format(pushdown_probe).load(uri))
    if tspark.pushdown_refusal(pyspark.__version__) is None:
        assert got == want
    else:
        assert got["purchases"] == want["purchases"]  # the query that pushed is right...
        assert got["count after a filter"] == want["purchases"], (  # ...and the next one reused its plan
            f"PySpark {pyspark.__version__} no longer reuses a pushed-down read plan for other queries of the "
            "DataFrame: check this release and set tessera.catalog.spark.PUSHDOWN_SAFE_SINCE"
        )
