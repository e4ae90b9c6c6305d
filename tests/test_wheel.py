"""A wheel built from the repository installs exactly one import package,
``tessera`` (plus PySpark's discovery module ``pyspark_tessera``), works
without the source tree, and its Spark source is found without register()."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = textwrap.dedent("""
    import importlib.metadata, json, os, sys
    dist = importlib.metadata.distribution("tessera")
    skip = ("tessera-", "../", "__pycache__")
    tops = sorted({str(f).split("/")[0] for f in dist.files if not str(f).startswith(skip)})
    import tessera
    assert os.path.dirname(tessera.__file__).startswith(sys.prefix), tessera.__file__
    for name in ("catalog", "commit", "stores", "format"):
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"a top-level {name!r} package is importable")
    from tessera.format.file.encodings import fastlanes
    assert fastlanes.native is not None, "the wheel lacks the C accelerator"
    assert fastlanes.native.__file__.startswith(sys.prefix), fastlanes.native.__file__
    import pyarrow as pa
    cat = tessera.connect(warehouse=sys.argv[1])
    cat.create_namespace("n")
    t = cat.create_table("n.t", pa.table({"i": [1, 2, 3]}))
    assert tessera.Table.open(t.uri).count_rows() == 3
    try:
        tessera.Table.open(os.path.join(sys.argv[1], "missing"))
    except tessera.errors.TesseraError:
        pass
    os.environ["PYSPARK_PYTHON"] = sys.executable   # Spark's Python workers run in this venv
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    df = spark.read.format("tessera").load(t.uri)   # no register(): PySpark found pyspark_tessera
    assert df.count() == 3
    spark.range(5).write.format("tessera").mode("append").save(os.path.join(sys.argv[1], "sp"))
    assert tessera.Table.open(os.path.join(sys.argv[1], "sp")).count_rows() == 5
    spark.stop()
    print(json.dumps(tops))
""")


@pytest.mark.slow
def test_wheel_exposes_only_tessera_and_runs_without_the_source_tree(tmp_path):
    import shutil

    src = tmp_path / "src"  # a copy: building in place would leave build/ in the repository
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".venv", ".venv-*", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
        ),
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = glob.glob(str(dist / "tessera-*.whl"))
    assert len(wheel) == 1
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", purelib, wheel[0]],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # the dependencies come from the test environment; a .pth inside a plain
    # directory is not processed, so the editable install there stays invisible
    with open(os.path.join(purelib, "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    # nothing of the test process's own Python may leak in (the Spark tests set
    # PYSPARK_DRIVER_PYTHON to this venv's interpreter, which has the editable install)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("PYSPARK_", "SPARK_"))}
    out = subprocess.run(
        [py, "-c", CHECK, str(tmp_path / "wh")], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    if out.returncode != 0:  # the Python error, not the JVM's stack
        lines = [ln for ln in out.stderr.splitlines() if not ln.lstrip().startswith(("at ", "..."))]
        pytest.fail("the wheel's check failed:\n" + "\n".join(lines[-60:])[-6000:])
    assert out.stdout.strip().splitlines()[-1] == '["pyspark_tessera.py", "tessera"]'
