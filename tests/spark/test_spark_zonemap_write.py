"""A Spark job's commit is followed by the zone-map update covering its fragments."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.table.indexes import ZONEMAP_COLUMNS

pytestmark = pytest.mark.spark


def test_spark_appends_and_overwrites_keep_zone_maps_covering(spark, table_uri):
    t = Table.create(table_uri, pa.table({"key": np.arange(1000, dtype=np.int64)}))
    t.create_index("key", rows_per_zone=100)
    # two fragments holding key ranges [1000, 2000) and [2000, 3000), sorted (round-robin
    # partitions would each span the whole range, and no zone could be skipped)
    src = spark.range(1000, 3000).withColumnRenamed("id", "key")
    src.repartitionByRange(2, "key").sortWithinPartitions("key").write.format("tessera").mode("append").save(table_uri)
    t = Table.open(table_uri)
    assert t.count_rows() == 3000 and len(t.fragments) == 3
    (idx,) = t.list_indices()
    assert set(idx["fragments"]) >= {f.id for f in t.fragments}
    scan = t.scanner(filter="key >= 2500 AND key < 2550")
    assert sorted(scan.to_table().column("key").to_pylist()) == list(range(2500, 2550))
    full = Table.open(table_uri).scanner()  # another table object: none of the files open yet
    full.to_table()
    assert scan.stats["fragments"] == 1 and scan.stats["pruned_fragments"] == 2, scan.stats
    assert scan.stats["bytes_read"] < full.stats["bytes_read"] / 2, (scan.stats, full.stats)
    # an overwrite drops the index; the table property rebuilds it after the job
    t.set_properties({ZONEMAP_COLUMNS: "key"})
    spark.range(0, 500).withColumnRenamed("id", "key").write.format("tessera").mode("overwrite").save(table_uri)
    t = Table.open(table_uri)
    (idx,) = t.list_indices()
    assert set(idx["fragments"]) == {f.id for f in t.fragments} and t.count_rows() == 500
