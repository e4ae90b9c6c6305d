"""pandas in and out: nullable dtypes and Categoricals round-trip, like pylance 14."""

from __future__ import annotations

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
    # the same values, readable by pylance from our table (stored as the value type)
    mine = lance.dataset(str(tmp_path / "t")).to_table()
    assert mine.column("c").to_pylist() == ["b", "a", None, "b"]
    assert mine.column("n").to_pylist() == [3, 1, 2, 3]
    # and pylance's own reading of our table gets the nullable dtypes too
    assert str(mine.to_pandas()["i"].dtype) == "Int64"
    # filters on a categorical column work as on pylance's
    assert t.count_rows("c = 'b'") == ref.count_rows("c = 'b'") == 2


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
