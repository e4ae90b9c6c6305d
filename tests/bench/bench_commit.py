"""Per-commit latency of small appends: pylance (local) vs Tessera with each coordinator.

    python tests/bench/bench_commit.py [--commits 500] [--only native,sqlite,...]

Every run measures, in the same process and run:
  pylance      lance.write_dataset(mode="append") on local disk
  native       Tessera, local disk, hard-link put-if-not-exists
  sqlite       Tessera, local disk, SQLite manifest store
  redis        Tessera, local disk, Redis manifest store (127.0.0.1:6379)
  postgres     Tessera, local disk, PostgreSQL manifest store (127.0.0.1:5432)
  mysql        Tessera, local disk, MariaDB manifest store (127.0.0.1:3306)
  s3-native    Tessera, S3 on moto's HTTP server, If-None-Match put
  s3-dynamodb  Tessera, S3 + DynamoDB on moto's HTTP server
Prints the median, p90 and the ratio of each median to pylance's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(_ROOT)  # deploy/ scripts


def _services():
    """tests/services.py, loaded by path (tests/ on sys.path would shadow packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tessera_bench_services", os.path.join(_ROOT, "tests", "services.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64()), "s": [f"row-{i}"]})


def bench_pylance(work: str, n: int) -> list[float]:
    import lance

    path = os.path.join(work, "pylance")
    lance.write_dataset(_row(-1), path)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        lance.write_dataset(_row(i), path, mode="append")
        out.append(time.perf_counter() - t0)
    return out


def bench_tessera(uri: str, n: int, commit_store=None, storage_options=None) -> list[float]:
    from tessera.catalog import Table

    t = Table.create(uri, _row(-1), commit_store=commit_store, storage_options=storage_options)
    out = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            t.append(_row(i))
            out.append(time.perf_counter() - t0)
        assert t.count_rows() == n + 1
    finally:
        if commit_store is not None:  # the shared databases keep nothing of the bench's
            from tessera.stores.manifest_store import normalize_table_uri, open_manifest_store

            ms = open_manifest_store(commit_store)
            ms.delete_table(normalize_table_uri(uri))
            ms.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    n = args.commits
    work = tempfile.mkdtemp(prefix="tessera-bench-commit-")
    wanted = set(filter(None, args.only.split(",")))
    results: dict[str, list[float]] = {}
    moto = None

    def want(name: str) -> bool:
        return not wanted or name in wanted or name == "pylance"

    try:
        results["pylance"] = bench_pylance(work, n)
        if want("native"):
            results["native"] = bench_tessera(os.path.join(work, "native"), n)
        if want("sqlite"):
            results["sqlite"] = bench_tessera(os.path.join(work, "sqlite"), n, f"sqlite:///{work}/commits.db")
        key = uuid.uuid4().hex[:8]
        if want("redis"):
            results["redis"] = bench_tessera(os.path.join(work, "redis"), n, "redis://127.0.0.1:6379/14")
        if want("postgres"):
            results["postgres"] = bench_tessera(
                os.path.join(work, "pg" + key), n, "postgresql+psycopg://postgres@127.0.0.1:5432/test"
            )
        if want("mysql"):
            results["mysql"] = bench_tessera(
                os.path.join(work, "my" + key), n, "mysql+pymysql://root@127.0.0.1:3306/test"
            )
        if want("s3-native") or want("s3-dynamodb"):
            services = _services()
            for k, v in services.AWS_ENV.items():
                os.environ.setdefault(k, v)
            moto = services.MotoServer()
            bucket = moto.new_bucket()
            opts = moto.storage_options()
            if want("s3-native"):
                results["s3-native"] = bench_tessera(f"s3://{bucket}/native", n, storage_options=opts)
            if want("s3-dynamodb"):
                from deploy.provision_dynamodb import create_table

                create_table("tessera-bench", region="us-east-1", endpoint_url=moto.endpoint)
                url = f"dynamodb:///tessera-bench?region=us-east-1&endpoint_url={moto.endpoint}"
                results["s3-dynamodb"] = bench_tessera(f"s3://{bucket}/ddb", n, url, storage_options=opts)
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(results["pylance"])
    print(f"{n} single-row appends per coordinator (latency per commit, milliseconds)")
    print(f"{'coordinator':14} {'median':>8} {'p90':>8} {'ratio':>7}")
    for name, xs in results.items():
        med, p90 = statistics.median(xs), float(np.percentile(xs, 90))
        print(f"{name:14} {med * 1e3:8.2f} {p90 * 1e3:8.2f} {med / base:6.2f}x")


if __name__ == "__main__":
    main()
