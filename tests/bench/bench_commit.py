"""Per-commit latency of small appends: pylance (local) vs Tessera with each coordinator.

    python tests/bench/bench_commit.py [--commits 500] [--only native,sqlite,...]
    python tests/bench/bench_commit.py --local-only [--commits 200]
    python tests/bench/bench_commit.py --s3 [--commits 20] [--processes 7]
    python tests/bench/bench_commit.py --txn-files [--commits 500]

Tables go under ``tempfile``'s directory: set ``TMPDIR`` to a directory of
the disk you mean to measure.  On the development machines /tmp itself made
pylance's appends 2-3x slower than elsewhere on the same disk (Tessera's
about 1.4x), which flatters Tessera.

``--local-only``: appends of 100 rows by path (a fresh open each) and with a
held handle, Tessera vs pylance in blocks of 25; then 4 x 50 and 8 x 25
appender processes on one table each, 3 rounds (wall time, errors reaching
the caller, rows checked exactly once).

``--s3``: requests per 1-row append counted at moto's server (held handle,
fresh handle, new process; native and DynamoDB; pylance's ``s3://`` and
``s3+ddb://`` beside them) and a new process's open + append time.

``--txn-files``: what the ``_transactions/*.txn`` file costs an append on
local disk: one held native table, its appends alternating with and without
the file (``commit.builder.TRANSACTION_FILES``), wall and CPU time medians.

Every run measures, in the same process and run:
  pylance      lance.write_dataset(mode="append") on local disk
  native       Tessera, local disk, hard-link put-if-not-exists
  sqlite       Tessera, local disk, SQLite manifest store
  redis        Tessera, local disk, Redis manifest store (127.0.0.1:6379)
  postgres     Tessera, local disk, PostgreSQL manifest store (127.0.0.1:5432)
  mysql        Tessera, local disk, MariaDB manifest store (127.0.0.1:3306)
  s3-native    Tessera, S3 on moto's HTTP server, If-None-Match put
  s3-dynamodb  Tessera, S3 + DynamoDB on moto's HTTP server
Prints the median, p90 and the ratio of each median to pylance's (and, for
the external stores, to native's).
"""

from __future__ import annotations

import argparse
import os
import random
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


def pylance_case(work: str):
    """``(step, finish)`` of pylance appends on local disk."""
    import lance

    path = os.path.join(work, "pylance")
    lance.write_dataset(_row(-1), path)

    def step(i: int) -> None:
        lance.write_dataset(_row(i), path, mode="append")

    return step, lambda n: None


def tessera_case(uri: str, commit_store=None, storage_options=None):
    """``(step, finish)`` of appends through a held Tessera handle; ``finish(n)``
    checks the rows and removes the bench's rows from a shared database."""
    from tessera.catalog import Table

    t = Table.create(uri, _row(-1), commit_store=commit_store, storage_options=storage_options)

    def finish(n: int) -> None:
        try:
            assert t.count_rows() == n + 1
        finally:
            if commit_store is not None:  # the shared databases keep nothing of the bench's
                from tessera.stores.registry import open_manifest_store
                from tessera.stores.uri import normalize_table_uri

                ms = open_manifest_store(commit_store)
                ms.delete_table(normalize_table_uri(uri))
                ms.close()

    return (lambda i: t.append(_row(i))), finish


def run_interleaved(cases: dict, n: int) -> dict[str, list[float]]:
    """Every case's i-th commit, then every case's (i+1)-th: the machine's drift
    (disk latency varies over a run) reaches all cases alike (the ratios to
    native are read from one interleaved run)."""
    out: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(n):
        for name, (step, _) in cases.items():
            t0 = time.perf_counter()
            step(i)
            out[name].append(time.perf_counter() - t0)
    for _, finish in cases.values():
        finish(n)
    return out


def bench_by_path(work: str, n: int) -> dict[str, list[float]]:
    """One 100-row append per call, the table opened by path each time (a script's
    or a task's way): ``Table.open(uri).append`` vs ``lance.write_dataset(mode="append")``."""
    import lance

    from tessera.catalog import Table

    rows = pa.table({"i": pa.array(range(100), pa.int64()), "s": [f"row-{i}" for i in range(100)]})
    t_uri, p_uri = os.path.join(work, "bypath-t"), os.path.join(work, "bypath-p")
    Table.create(t_uri, rows)
    lance.write_dataset(rows, p_uri)
    held = Table.open(t_uri)
    held_none = Table.open(t_uri, durability="none")
    steps = {
        "pylance by path": lambda: lance.write_dataset(rows, p_uri, mode="append"),
        "tessera by path": lambda: Table.open(t_uri).append(rows),
        "tessera held": lambda: held.append(rows),
        # durability="none": pylance's behaviour (no fsync)
        "by path, none": lambda: Table.open(t_uri, durability="none").append(rows),
        "held, none": lambda: held_none.append(rows),
    }
    out: dict[str, list[float]] = {name: [] for name in steps}
    # blocks of BLOCK appends per case, in turn: drift over the run reaches every
    # case alike, and pylance's appends do not each follow a Tessera fsync
    # (alternating one by one, pylance's median rises 2-3x on ext4: its
    # unsynced files ride in the journal commits Tessera's fsyncs force)
    done = 0
    while done < n:
        k = min(BLOCK, n - done)
        for name, step in steps.items():
            for _ in range(k):
                t0 = time.perf_counter()
                step()
                out[name].append(time.perf_counter() - t0)
        done += k
    return out


BLOCK = 25


def _appender(kind: str, uri: str, appends: int, w: int, q, go) -> None:
    rows = pa.table({"w": pa.array([w] * 10, pa.int64()), "k": pa.array(range(10), pa.int64())})
    errors = 0
    try:
        if kind == "pylance":
            import lance

            lance.dataset(uri)
            q.put("ready")
            go.wait()
            for _ in range(appends):
                while True:  # pylance raises on a lost race it cannot rebase; the caller retries
                    try:
                        lance.write_dataset(rows, uri, mode="append")
                        break
                    except Exception:  # noqa: BLE001 - counted, then retried
                        errors += 1
        else:
            from tessera.catalog import Table

            t = Table.open(uri)
            q.put("ready")
            go.wait()
            for _ in range(appends):
                t.append(rows)
        q.put((w, errors, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put((w, errors, f"{type(exc).__name__}: {exc}"))


def bench_concurrent(work: str, writers: int, appends: int) -> dict[str, tuple[float, int]]:
    """``writers`` processes x ``appends`` appends on one table: wall time from a
    common start (each process has imported its library and opened the table)
    to the last append, and the errors that reached the caller (pylance's are
    retried by the bench)."""
    import multiprocessing as mp

    import lance

    from tessera.catalog import Table

    seed = pa.table({"w": pa.array([-1], pa.int64()), "k": pa.array([0], pa.int64())})
    out = {}
    ctx = mp.get_context("spawn")
    for kind in ("pylance", "tessera"):
        uri = os.path.join(work, f"conc-{kind}-{writers}")
        if kind == "pylance":
            lance.write_dataset(seed, uri)
        else:
            Table.create(uri, seed)
        q, go = ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_appender, args=(kind, uri, appends, w, q, go)) for w in range(writers)]
        for p in procs:
            p.start()
        for _ in procs:  # every process has imported its library and opened the table
            ready = q.get(timeout=300)
            if ready != "ready":
                raise RuntimeError(f"{kind}: {ready}")
        # all start together: time from the go to the last one done
        t0 = time.perf_counter()
        go.set()
        results = [q.get(timeout=900) for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join(60)
        failed = [r for r in results if r[2]]
        if failed:
            raise RuntimeError(f"{kind}: {failed}")
        rows = (
            lance.dataset(uri).count_rows() if kind == "pylance" else Table.open(uri).count_rows()
        )  # every acknowledged append exactly once
        assert rows == 1 + writers * appends * 10, (kind, rows)
        out[kind] = (wall, sum(r[1] for r in results))
    return out


_NEW_PROCESS = r"""
import time
t_start = time.perf_counter()
import json, sys
kind, uri, opts, store = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] or None
import pyarrow as pa
rows = pa.table({"i": pa.array([7], pa.int64()), "s": ["new"]})
if kind == "pylance":
    import lance
else:
    from tessera.catalog import Table
imported = time.perf_counter() - t_start
print("imported", flush=True)
sys.stdin.readline()  # the parent zeroes the server's counts, then says go
t0 = time.perf_counter()
if kind == "pylance":
    lance.write_dataset(rows, uri, mode="append", storage_options=opts)
else:
    Table.open(uri, commit_store=store, storage_options=opts).append(rows)
print(json.dumps({"seconds": time.perf_counter() - t0, "imported": imported}), flush=True)
"""


def _requests(counts: dict[str, int]) -> str:
    s3 = sum(v for k, v in counts.items() if not k.startswith("DDB:"))
    ddb = sum(v for k, v in counts.items() if k.startswith("DDB:"))
    return f"{s3}" + (f" + {ddb} DDB" if ddb else "")


def _byte_compile() -> None:
    """Byte-compile Tessera's modules as pip does on install: with
    PYTHONDONTWRITEBYTECODE set (as on these machines) a source checkout
    recompiles every module in every new process, which an installed Tessera
    never does (pylance's Python modules are compiled in site-packages)."""
    import compileall

    for folder in ("tessera", "catalog", "commit", "format", "stores"):
        compileall.compile_dir(os.path.join(_ROOT, folder), quiet=1)


def s3_suite(n: int, processes: int) -> None:
    """Requests per 1-row append counted at moto's server (a process of its
    own), held handle / fresh handle / new process, native S3 and DynamoDB,
    Tessera and pylance; and a new process's time: its imports, then its
    open + append (timed apart: the parent zeroes the request counts between)."""
    import json
    import subprocess

    import lance
    from moto_process import MotoProcess

    from deploy.provision_dynamodb import create_table
    from tessera.catalog import Table

    for k, v in _services().AWS_ENV.items():
        os.environ.setdefault(k, v)
    _byte_compile()
    # a user's Python keeps compiled modules, its site-packages' too (an
    # installer may not have compiled them, and with PYTHONDONTWRITEBYTECODE,
    # as on these machines, every child would compile botocore's and
    # pylance's modules again: seconds that are no part of either's cost)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = _row(0)
    with MotoProcess() as moto:
        bucket = moto.new_bucket()
        ddb = moto.client("dynamodb")
        lance_table = f"lance-{uuid.uuid4().hex[:8]}"
        _services().create_lance_dynamodb_table(ddb, lance_table)
        create_table("tessera-bench", region="us-east-1", endpoint_url=moto.endpoint)
        t_store = f"dynamodb:///tessera-bench?region=us-east-1&endpoint_url={moto.endpoint}"
        t_opts, l_opts = moto.storage_options(), moto.lance_storage_options()
        l_ddb_opts = {**l_opts, "dynamodb_endpoint": moto.endpoint}
        cases = {
            "pylance s3": ("pylance", f"s3://{bucket}/pl", l_opts, None),
            "pylance s3+ddb": ("pylance", f"s3+ddb://{bucket}/pld?ddbTableName={lance_table}", l_ddb_opts, None),
            "tessera s3": ("tessera", f"s3://{bucket}/ts", t_opts, None),
            "tessera s3+ddb": ("tessera", f"s3://{bucket}/tsd", t_opts, t_store),
        }
        print(
            f"moto S3/DynamoDB in a process of its own; requests per 1-row append counted at the server "
            f"(medians of {n}; new process: {processes} processes)"
        )
        print(
            f"{'case':16} {'held':>10} {'fresh':>10} {'new process':>12} "
            f"{'new process ms: import':>23} {'open+append':>12} {'both':>6}"
        )
        for name, (kind, uri, opts, store) in cases.items():
            held_counts, fresh_counts = [], []
            if kind == "pylance":
                lance.write_dataset(rows, uri, storage_options=opts)
                for _ in range(n):
                    moto.reset()
                    lance.write_dataset(rows, uri, mode="append", storage_options=opts)
                    fresh_counts.append(moto.reset())
            else:
                # the held handle on a table of its own (a fresh handle's commit would make it rebase)
                held = Table.create(uri + "-held", rows, commit_store=store, storage_options=opts)
                Table.create(uri, rows, commit_store=store, storage_options=opts)
                for _ in range(n):
                    moto.reset()
                    held.append(rows)
                    held_counts.append(moto.reset())
                    Table.open(uri, commit_store=store, storage_options=opts).append(rows)
                    fresh_counts.append(moto.reset())
            new_counts, seconds, imports = [], [], []
            for i in range(processes + 1):  # the first, untimed, compiles what its imports had not compiled yet
                proc = subprocess.Popen(
                    [sys.executable, "-c", _NEW_PROCESS, kind, uri, json.dumps(opts), store or ""],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=_ROOT,
                    env=env,
                )
                assert proc.stdin is not None and proc.stdout is not None
                assert proc.stdout.readline().strip() == "imported"
                moto.reset()
                proc.stdin.write("go\n")
                proc.stdin.flush()
                reply = json.loads(proc.stdout.readline())
                proc.wait(60)
                counted = moto.reset()
                if i == 0:
                    continue
                seconds.append(reply["seconds"])
                imports.append(reply["imported"])
                new_counts.append(counted)

            def med(counts: list[dict[str, int]]) -> str:
                if not counts:
                    return "-"
                return _requests(sorted(counts, key=lambda c: sum(c.values()))[len(counts) // 2])

            print(
                f"{name:16} {med(held_counts):>10} {med(fresh_counts):>10} {med(new_counts):>12} "
                f"{statistics.median(imports) * 1e3:23.1f} {statistics.median(seconds) * 1e3:12.1f} "
                f"{statistics.median([a + b for a, b in zip(imports, seconds)]) * 1e3:6.0f}"
            )
        ddb.delete_table(TableName=lance_table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--only", default="")
    ap.add_argument("--local-only", action="store_true", help="by path, held handle and concurrent processes only")
    ap.add_argument("--s3", action="store_true", help="requests per append and new-process time on moto S3 only")
    ap.add_argument("--processes", type=int, default=7, help="new processes per case (--s3)")
    ap.add_argument("--txn-files", action="store_true", help="the transaction file's cost per append only")
    args = ap.parse_args()
    if args.txn_files:
        txn_file_cost(args.commits)
        return
    if args.local_only:
        local_suite(args.commits)
        return
    if args.s3:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # moto_process
        s3_suite(args.commits, args.processes)
        return
    n = args.commits
    work = tempfile.mkdtemp(prefix="tessera-bench-commit-")
    wanted = set(filter(None, args.only.split(",")))
    results: dict[str, list[float]] = {}
    moto = None

    def want(name: str) -> bool:
        return not wanted or name in wanted or name == "pylance"

    cases: dict = {}
    try:
        cases["pylance"] = pylance_case(work)
        if want("native"):
            cases["native"] = tessera_case(os.path.join(work, "native"))
        if want("sqlite"):
            cases["sqlite"] = tessera_case(os.path.join(work, "sqlite"), f"sqlite:///{work}/commits.db")
        key = uuid.uuid4().hex[:8]
        if want("redis"):
            cases["redis"] = tessera_case(os.path.join(work, "redis"), "redis://127.0.0.1:6379/14")
        if want("postgres"):
            cases["postgres"] = tessera_case(
                os.path.join(work, "pg" + key), "postgresql+psycopg://postgres@127.0.0.1:5432/test"
            )
        if want("mysql"):
            cases["mysql"] = tessera_case(os.path.join(work, "my" + key), "mysql+pymysql://root@127.0.0.1:3306/test")
        if want("s3-native") or want("s3-dynamodb"):
            services = _services()
            for k, v in services.AWS_ENV.items():
                os.environ.setdefault(k, v)
            moto = services.MotoServer()
            bucket = moto.new_bucket()
            opts = moto.storage_options()
            if want("s3-native"):
                cases["s3-native"] = tessera_case(f"s3://{bucket}/native", storage_options=opts)
            if want("s3-dynamodb"):
                from deploy.provision_dynamodb import create_table

                create_table("tessera-bench", region="us-east-1", endpoint_url=moto.endpoint)
                url = f"dynamodb:///tessera-bench?region=us-east-1&endpoint_url={moto.endpoint}"
                cases["s3-dynamodb"] = tessera_case(f"s3://{bucket}/ddb", url, storage_options=opts)
        # pylance alone first: interleaved with fsyncing writers, its own file
        # creations wait on their journal commits (its median doubles or more);
        # Tessera's coordinators interleaved with one another (all fsync alike)
        results = run_interleaved({"pylance": cases.pop("pylance")}, n)
        results.update(run_interleaved(cases, n))
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(results["pylance"])
    print(f"{n} single-row appends per coordinator (latency per commit, milliseconds)")
    native = statistics.median(results["native"]) if "native" in results else None
    print(f"{'coordinator':14} {'median':>8} {'p90':>8} {'ratio':>7} {'vs native':>9}")
    for name, xs in results.items():
        med, p90 = statistics.median(xs), float(np.percentile(xs, 90))
        vs_native = f"{med / native:8.2f}x" if native and name not in ("pylance", "native") else ""
        print(f"{name:14} {med * 1e3:8.2f} {p90 * 1e3:8.2f} {med / base:6.2f}x {vs_native}")


ROUNDS = 3


def local_suite(n: int) -> None:
    work = tempfile.mkdtemp(prefix="tessera-bench-commit-")
    try:
        by_path = bench_by_path(work, n)
        base = statistics.median(by_path["pylance by path"])
        print(f"{n} appends of 100 rows, local disk (Tessera's default fsyncs each commit; 'none' and pylance do not)")
        print(f"{'case':18} {'median ms':>10} {'p90 ms':>8} {'vs pylance':>10}")
        for name, xs in by_path.items():
            med = statistics.median(xs)
            print(f"{name:18} {med * 1e3:10.2f} {float(np.percentile(xs, 90)) * 1e3:8.2f} {med / base:9.2f}x")
        for writers, appends in ((4, 50), (8, 25)):
            # one run is noisy (+-30% on two cores): ROUNDS runs, pylance and Tessera in turn, medians
            runs = [bench_concurrent(os.path.join(work, f"r{r}"), writers, appends) for r in range(ROUNDS)]
            pw = statistics.median(r["pylance"][0] for r in runs)
            tw = statistics.median(r["tessera"][0] for r in runs)
            pe, te = sum(r["pylance"][1] for r in runs), sum(r["tessera"][1] for r in runs)
            print(
                f"{writers} processes x {appends} appends, median of {ROUNDS}: pylance {pw:.2f} s "
                f"({pe} retried errors), tessera {tw:.2f} s ({te} errors) -> {tw / pw:.2f}x"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def txn_file_cost(n: int) -> None:
    """Appends to one held table on local disk, alternately with and without the
    transaction file: both sides meet the same disk and the same table size."""
    from tessera.catalog import Table
    from tessera.commit import builder

    work = tempfile.mkdtemp(prefix="tessera-bench-txn-")
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    saved = builder.TRANSACTION_FILES
    try:
        t = Table.create(os.path.join(work, "t"), _row(-1))
        # each pair in a random order: a fixed alternation can phase-lock with the
        # garbage collector's periodic collections and hand them all to one side
        order = [side for _ in range(n) for side in random.sample((True, False), 2)]
        for i, with_file in enumerate(order):
            builder.TRANSACTION_FILES = with_file
            w0, c0 = time.perf_counter(), time.process_time()
            t.append(_row(i))
            wall[with_file].append(time.perf_counter() - w0)
            cpu[with_file].append(time.process_time() - c0)
        assert t.count_rows() == 2 * n + 1
        files = len(os.listdir(os.path.join(work, "t", "_transactions")))
        print(f"{n} appends each way, held native table, local disk; {files} transaction files written")
        print(f"{'case':18} {'wall ms':>8} {'p90 ms':>8} {'cpu ms':>8}")
        for with_file in (False, True):
            name = "with .txn file" if with_file else "inline only"
            xs = wall[with_file]
            print(
                f"{name:18} {statistics.median(xs) * 1e3:8.3f} {float(np.percentile(xs, 90)) * 1e3:8.3f} "
                f"{statistics.median(cpu[with_file]) * 1e3:8.3f}"
            )
        dw = statistics.median(wall[True]) - statistics.median(wall[False])
        dc = statistics.median(cpu[True]) - statistics.median(cpu[False])
        print(f"the file costs {dw * 1e3:+.3f} ms wall, {dc * 1e3:+.3f} ms CPU per append (medians)")
    finally:
        builder.TRANSACTION_FILES = saved
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
