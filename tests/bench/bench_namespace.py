"""Append latency of pylance committing through Tessera's Lance Namespace vs pylance by URI.

    python tests/bench/bench_namespace.py [--commits 200] [--only uri,ns-native,...] [--durability sync|none]

Every mode runs in the same process and run, one 1-row append per commit
(``lance.write_dataset(mode="append")``), on local disk:
  uri            pylance by URI (no namespace): the baseline
  ns-native      the Python plugin (TesseraNamespace), native put-if-not-exists
  ns-catalog     the Python plugin, the catalog's SQLite manifest store
  ns-redis       the Python plugin, Redis manifest store (127.0.0.1:6379)
  rest-native    pylance's REST client against `tessera serve` (a server process), native
  t-uri          a Tessera Table by path (Table.append), native
  t-served       a Tessera Table through `tessera serve`: served commits (one request each)
  t-managed      the same, committing as pylance does (stage + create_table_version)
Prints the median, p90 and the ratio of each median to the baseline's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pyarrow as pa

#: Tessera's durability in every mode (--durability): "sync" (its default) or "none"
#: (pylance's behaviour: pylance by URI syncs nothing)
DURABILITY = ["sync"]

MODES = ["uri", "ns-native", "ns-catalog", "ns-redis", "rest-native", "t-uri", "t-served", "t-managed"]


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64()), "s": [f"row-{i}"]})


def _timed(n: int, append) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        append(i)
        out.append(time.perf_counter() - t0)
    return out


def bench_uri(work: str, n: int) -> list[float]:
    import lance

    path = os.path.join(work, "uri.lance")
    lance.write_dataset(_row(-1), path)
    return _timed(n, lambda i: lance.write_dataset(_row(i), path, mode="append"))


def _through(ns, n: int) -> list[float]:
    import lance
    import lance_namespace

    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["b"], mode="exist_ok"))
    tid = ["b", "t"]
    lance.write_dataset(_row(-1), namespace_client=ns, table_id=tid, mode="create")
    return _timed(n, lambda i: lance.write_dataset(_row(i), namespace_client=ns, table_id=tid, mode="append"))


def bench_plugin(work: str, n: int, commit_store: str) -> list[float]:
    import lance_namespace

    import tessera  # noqa: F401 - registers "tessera"

    props = {"warehouse": os.path.join(work, "wh"), "commit_store": commit_store, "durability": DURABILITY[0]}
    ns = lance_namespace.connect("tessera", props)
    return _through(ns, n)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(work: str) -> Iterator[str]:
    """A `tessera serve` process on a free port; its URL."""
    port = _free_port()
    tessera_cli = os.path.join(os.path.dirname(sys.executable), "tessera")
    wh = os.path.join(work, "wh-rest")
    server = subprocess.Popen(
        [tessera_cli, "--warehouse", wh, "serve", "--port", str(port), "--durability", DURABILITY[0]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("`tessera serve` did not start (is the REST server installed?)") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def bench_rest(work: str, n: int) -> list[float]:
    import lance_namespace

    with _server(work) as url:
        return _through(lance_namespace.connect("rest", {"uri": url}), n)


def bench_tessera_uri(work: str, n: int) -> list[float]:
    import tessera

    t = tessera.Table.create(os.path.join(work, "t"), _row(-1), durability=DURABILITY[0])
    return _timed(n, lambda i: t.append(_row(i)))


def bench_tessera_rest(work: str, n: int, served: bool) -> list[float]:
    import lance
    import lance_namespace

    import tessera

    with _server(work) as url:
        ns = lance_namespace.connect("rest", {"uri": url})
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["b"], mode="exist_ok"))
        lance.write_dataset(_row(-1), namespace_client=ns, table_id=["b", "t"], mode="create")
        t = tessera.Table.open("b.t", namespace=url, durability=DURABILITY[0])
        if not served:
            t._handler.served = None  # commit as pylance does: stage, then create_table_version
        return _timed(n, lambda i: t.append(_row(i)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--only", default=",".join(MODES))
    ap.add_argument("--durability", choices=["sync", "none"], default="sync")
    args = ap.parse_args()
    DURABILITY[0] = args.durability
    modes = [m for m in args.only.split(",") if m]
    results: dict[str, list[float]] = {}
    for mode in modes:
        work = tempfile.mkdtemp(prefix=f"bench-ns-{mode}-")
        try:
            if mode == "uri":
                results[mode] = bench_uri(work, args.commits)
            elif mode == "ns-native":
                results[mode] = bench_plugin(work, args.commits, "native")
            elif mode == "ns-catalog":
                results[mode] = bench_plugin(work, args.commits, "catalog")
            elif mode == "ns-redis":
                results[mode] = bench_plugin(work, args.commits, "redis://127.0.0.1:6379/0")
            elif mode == "rest-native":
                results[mode] = bench_rest(work, args.commits)
            elif mode == "t-uri":
                results[mode] = bench_tessera_uri(work, args.commits)
            elif mode in ("t-served", "t-managed"):
                results[mode] = bench_tessera_rest(work, args.commits, served=mode == "t-served")
            else:
                raise SystemExit(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(results["uri"]) if "uri" in results else None
    print(f"{'mode':<12} {'median ms':>10} {'p90 ms':>9} {'vs uri':>8}   ({args.commits} one-row appends each)")
    for mode, times in results.items():
        med = statistics.median(times)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        ratio = f"{med / base:.2f}x" if base else "-"
        print(f"{mode:<12} {med * 1e3:>10.2f} {p90 * 1e3:>9.2f} {ratio:>8}")


if __name__ == "__main__":
    main()
