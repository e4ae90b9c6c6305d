"""pandas in and out: nullable dtypes and Categoricals round-trip, like pylance 14."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tessera.catalog import Table

pd = pytest.importorskip("pandas")


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "i": pd.array([1, None, 3, 4], dtype="Int64"),
            "b": pd.array([True, None, False, True], dtype="boolean"),
            "s": pd.array(["x", None, "z", "w"], dtype="string"),
            "f": pd.array([1.5, None, 2.0, 3.0], dtype="Float64"),
            "c": pd.Categorical(["b", "a", None, "b"], categories=["z", "b", "a"]),
            "n": pd.Categorical([3, 1, 2, 3]),
            "o": ["a", "b", None, "d"],
            "plain": [1.0, 2.0, 3.0, 4.0],
        }
    )


@pytest.fixture()
def written(tmp_path):
    df = _frame()
    return df, Table.create(str(tmp_path / "t"), df)


def test_nullable_dtypes_round_trip(written) -> None:
    df, t = written
    out = t.to_pandas()
    assert dict(out.dtypes) == dict(df.dtypes)
    assert str(out["i"].dtype) == "Int64" and str(out["b"].dtype) == "boolean"
    assert str(out["f"].dtype) == "Float64" and isinstance(out["s"].dtype, pd.StringDtype)
    assert df.equals(out)
    assert out["i"].isna().tolist() == [False, True, False, False]


def test_reopened_table_and_projection_keep_dtypes(written, tmp_path) -> None:
    df, _ = written
    t = Table.open(str(tmp_path / "t"))
    assert df.equals(t.to_pandas())
    part = t.to_pandas(columns=["c", "i"], filter="i >= 3")
    assert list(part.columns) == ["c", "i"] and str(part["i"].dtype) == "Int64"
    assert part["i"].tolist() == [3, 4] and isinstance(part["c"].dtype, pd.CategoricalDtype)


def test_schema_metadata_kept(written) -> None:
    df, t = written
    assert b"pandas" in (t.schema.metadata or {})


def test_categorical_matches_pylance(written, tmp_path) -> None:
    lance = pytest.importorskip("lance")
    df, t = written
    ref = lance.write_dataset(df, str(tmp_path / "ref.lance"))
    theirs = ref.to_table().to_pandas()
    ours = t.to_pandas()
    for name in ("c", "n"):
        assert isinstance(ours[name].dtype, pd.CategoricalDtype)
        assert list(ours[name].cat.categories) == list(theirs[name].cat.categories)
        assert ours[name].astype(object).tolist() == theirs[name].astype(object).tolist()
    # the same values, readable by pylance from our table, as dictionary columns like its own
    mine = lance.dataset(str(tmp_path / "t")).to_table()
    assert mine.column("c").to_pylist() == ["b", "a", None, "b"]
    assert mine.column("n").to_pylist() == [3, 1, 2, 3]
    assert mine.schema.field("c").type == ref.schema.field("c").type == pa.dictionary(pa.int8(), pa.string())
    assert mine.schema.field("n").type == ref.schema.field("n").type == pa.dictionary(pa.int8(), pa.int64())
    assert list(mine.to_pandas()["c"].cat.categories) == ["z", "b", "a"]
    # and pylance's own reading of our table gets the nullable dtypes too
    assert str(mine.to_pandas()["i"].dtype) == "Int64"
    # filters on a categorical column work as on pylance's
    assert t.count_rows("c = 'b'") == ref.count_rows("c = 'b'") == 2


VERSIONS = ("2.0", "2.1", "2.2")


def _manifest_fields(uri: str) -> dict:
    from tessera.format.table.manifest import read_manifest

    path = max(Path(uri, "_versions").glob("*.manifest"), key=lambda p: p.stat().st_mtime_ns)
    return {f.name: f for f in read_manifest(path.read_bytes()).manifest.fields}


@pytest.mark.parametrize("version", VERSIONS)
def test_categoricals_are_dictionary_columns_like_pylances(lance, tmp_path, version) -> None:
    df = _frame()
    ours = Table.create(str(tmp_path / "t"), df, file_version=version)
    lance.write_dataset(df, str(tmp_path / "ref"), data_storage_version=version)
    assert ours.schema.field("c").type == pa.dictionary(pa.int8(), pa.string())
    assert ours.schema.field("n").type == pa.dictionary(pa.int8(), pa.int64())
    mine, theirs = _manifest_fields(str(tmp_path / "t")), _manifest_fields(str(tmp_path / "ref"))
    for name in ("c", "n"):
        assert mine[name].logical_type == theirs[name].logical_type
        assert mine[name].SerializeToString() == theirs[name].SerializeToString()
    assert mine["c"].logical_type == "dict:string:int8:false"


@pytest.mark.parametrize("version", VERSIONS)
def test_categorical_round_trip_through_pylance(lance, tmp_path, version) -> None:
    df = _frame()
    uri = str(tmp_path / "t")
    t = Table.create(uri, df, file_version=version)
    assert t.schema.field("c").type == pa.dictionary(pa.int8(), pa.string())
    # pylance reads Tessera's table: the same Arrow table, dictionaries included
    # (pylance's 2.0 reader adds a null item to a dictionary whose column has nulls)
    theirs = lance.dataset(uri).to_table()
    assert theirs.schema.equals(t.schema) and theirs.to_pylist() == t.to_arrow().to_pylist()
    if version != "2.0":
        assert theirs.equals(t.to_arrow())
    out = t.to_pandas()
    assert df.equals(out)
    assert list(out["c"].cat.categories) == ["z", "b", "a"] and list(out["n"].cat.categories) == [1, 2, 3]
    if version != "2.0":  # pylance's 2.0 reader hands out a null category, which pandas refuses
        assert df.equals(theirs.to_pandas())


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_written_categoricals_read_by_tessera(lance, tmp_path, version) -> None:
    df = _frame()
    uri = str(tmp_path / "ref")
    lance.write_dataset(df, uri, data_storage_version=version)
    lance.write_dataset(df.iloc[1:], uri, mode="append")  # a second fragment
    theirs = lance.dataset(uri).to_table()
    t = Table.open(uri)
    ours = t.to_arrow()
    assert ours.schema.equals(theirs.schema)
    assert ours.to_pylist() == theirs.to_pylist()
    if version != "2.0":  # pylance 2.0 keeps a null item in the dictionaries it reads
        assert ours.equals(theirs)
    out = t.to_pandas()
    assert list(out["c"].cat.categories) == ["z", "b", "a"]
    assert out["c"].astype(object).where(out["c"].notna(), None).tolist() == ["b", "a", None, "b", "a", None, "b"]
    assert t.take([0, 4]).column("c").to_pylist() == ["b", "a"]
    assert t.count_rows("c = 'b'") == 3


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_appends_to_a_categorical_table_and_tessera_to_pylances(lance, tmp_path, version) -> None:
    df = _frame()
    uri = str(tmp_path / "t")
    Table.create(uri, df, file_version=version)
    lance.write_dataset(df.iloc[:2], uri, mode="append")
    t = Table.open(uri)
    t.append(df.iloc[2:])
    got = t.to_pandas()
    assert got["c"].astype(object).where(got["c"].notna(), None).tolist() == ["b", "a", None, "b", "b", "a", None, "b"]
    assert lance.dataset(uri).to_table().to_pylist() == t.to_arrow().to_pylist()


def test_plain_and_categorical_columns_do_not_mix_on_append(lance, tmp_path) -> None:
    from tessera.catalog.errors import SchemaMismatchError

    cat = pd.DataFrame({"c": pd.Categorical(["a", "b"])})
    plain = pd.DataFrame({"c": ["x", "y"]})
    t = Table.create(str(tmp_path / "t"), cat)
    with pytest.raises(SchemaMismatchError, match="dictionary"):
        t.append(plain)
    with pytest.raises(SchemaMismatchError, match="dictionary"):
        t.append(pa.table({"c": pa.array(["x"]).dictionary_encode()}))  # int32 indices, the table's are int8
    s = Table.create(str(tmp_path / "s"), plain)
    with pytest.raises(SchemaMismatchError, match="dictionary"):
        s.append(cat)
    assert t.count_rows() == 2 and s.count_rows() == 2
    # pylance refuses both as well
    lance.write_dataset(cat, str(tmp_path / "lt"))
    with pytest.raises(OSError, match="different schema"):
        lance.write_dataset(plain, str(tmp_path / "lt"), mode="append")
    lance.write_dataset(plain, str(tmp_path / "ls"))
    with pytest.raises(OSError, match="different schema"):
        lance.write_dataset(cat, str(tmp_path / "ls"), mode="append")


def test_ordered_flag_alone_does_not_block_an_append(tmp_path) -> None:
    ordered = pd.DataFrame({"g": pd.Categorical(["lo", "hi"], categories=["lo", "hi"], ordered=True)})
    t = Table.create(str(tmp_path / "t"), ordered)
    t.append(pd.DataFrame({"g": pd.Categorical(["hi"])}))  # unordered: takes the table's flag
    out = t.to_pandas()
    assert out["g"].cat.ordered and out["g"].astype(object).tolist() == ["lo", "hi", "hi"]
    assert t.schema.field("g").type == pa.dictionary(pa.int8(), pa.string(), ordered=True)


def test_more_categories_than_the_index_type_holds_go_to_separate_files(lance, tmp_path) -> None:
    # each frame's categories fit int8 indices, all of them together do not:
    # every data file keeps its dictionaries within the index type
    frames = [pd.DataFrame({"c": pd.Categorical([f"{k}-{i}" for i in range(100)])}) for k in range(3)]
    data = pa.Table.from_batches([pa.RecordBatch.from_pandas(f, preserve_index=False) for f in frames])
    uri = str(tmp_path / "t")
    t = Table.create(uri, data)
    assert t.schema.field("c").type == pa.dictionary(pa.int8(), pa.string())
    assert len(t.manifest.fragments) == 3
    expected = [f"{k}-{i}" for k in range(3) for i in range(100)]
    assert t.to_arrow().column("c").to_pylist() == expected
    assert lance.dataset(uri).to_table().column("c").to_pylist() == expected
    out = t.to_pandas()
    assert len(out["c"].cat.categories) == 300 and out["c"].astype(object).tolist() == expected


def test_categoricals_pylance_cannot_store_keep_their_values(tmp_path) -> None:
    import datetime as dt

    df = pd.DataFrame({"d": pd.Categorical([dt.date(2024, 1, 2), None, dt.date(2023, 5, 6)]), "x": [1, 2, 3]})
    t = Table.create(str(tmp_path / "t"), df)
    assert not pa.types.is_dictionary(t.schema.field("d").type)  # stored as its values
    out = t.to_pandas()
    assert isinstance(out["d"].dtype, pd.CategoricalDtype)
    assert out["d"].astype(object).tolist()[0] == df["d"].astype(object).tolist()[0]
    assert out["d"].isna().tolist() == [False, True, False]


def test_ordered_categorical_and_new_values_after_append(written) -> None:
    df, t = written
    t.append(
        pd.DataFrame(
            {
                "i": pd.array([7], dtype="Int64"),
                "b": pd.array([None], dtype="boolean"),
                "s": pd.array(["q"], dtype="string"),
                "f": pd.array([None], dtype="Float64"),
                "c": pd.Categorical(["new"]),
                "n": pd.Categorical([9]),
                "o": ["o"],
                "plain": [0.0],
            }
        )
    )
    out = t.to_pandas()
    assert list(out["c"].cat.categories) == ["z", "b", "a", "new"]
    assert out["c"].astype(object).tolist()[-1] == "new" and out["n"].tolist()[-1] == 9
    assert str(out["i"].dtype) == "Int64" and out["i"].tolist()[-1] == 7


def test_ordered_flag_kept(tmp_path) -> None:
    df = pd.DataFrame({"g": pd.Categorical(["lo", "hi", "lo"], categories=["lo", "hi"], ordered=True)})
    out = Table.create(str(tmp_path / "t"), df).to_pandas()
    assert out["g"].cat.ordered and list(out["g"].cat.categories) == ["lo", "hi"]
    assert df.equals(out)


def test_overwrite_with_a_frame(written) -> None:
    df, t = written
    t.overwrite(df.iloc[:2])
    assert df.iloc[:2].equals(t.to_pandas())


def test_plain_arrow_table_has_no_pandas_surprises(tmp_path) -> None:
    t = Table.create(str(tmp_path / "t"), pa.table({"x": pa.array([1, None], pa.int64())}))
    out = t.to_pandas()
    assert str(out["x"].dtype) == "float64"  # pyarrow's default, as pylance's


def test_series_and_bad_frames(tmp_path) -> None:
    from tessera.catalog.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        Table.create(str(tmp_path / "bad"), pd.DataFrame({"x": [object(), 1]}))


def test_no_pyspark_pandas_warning_for_this_pandas() -> None:
    assert int(pd.__version__.split(".")[0]) < 3, "PySpark 4.x warns on pandas >= 3; pin pandas<3"
