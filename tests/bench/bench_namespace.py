"""Append latency of pylance committing through Tessera's Lance Namespace vs pylance by URI.

    python tests/bench/bench_namespace.py [--commits 200] [--only uri,ns-native,...] [--durability sync|none]

Every mode runs in the same process and run, one 1-row append per commit
(``lance.write_dataset(mode="append")``), on local disk, the modes taking
turns in blocks of 25 appends (a machine whose speed drifts meets them all):
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
from collections.abc import Callable, Iterator

import pyarrow as pa

#: Tessera's durability in every mode (--durability): "sync" (its default) or "none"
#: (pylance's behaviour: pylance by URI syncs nothing)
DURABILITY = ["sync"]

MODES = ["uri", "ns-native", "ns-catalog", "ns-redis", "rest-native", "t-uri", "t-served", "t-managed"]


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64()), "s": [f"row-{i}"]})


Append = Callable[[int], object]


def setup_uri(stack: contextlib.ExitStack, work: str) -> Append:
    import lance

    path = os.path.join(work, "uri.lance")
    lance.write_dataset(_row(-1), path)
    return lambda i: lance.write_dataset(_row(i), path, mode="append")


def _through(ns) -> Append:
    import lance
    import lance_namespace

    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["b"], mode="exist_ok"))
    tid = ["b", "t"]
    lance.write_dataset(_row(-1), namespace_client=ns, table_id=tid, mode="create")
    return lambda i: lance.write_dataset(_row(i), namespace_client=ns, table_id=tid, mode="append")


def setup_plugin(stack: contextlib.ExitStack, work: str, commit_store: str) -> Append:
    import lance_namespace

    import tessera  # noqa: F401 - registers "tessera"

    props = {"warehouse": os.path.join(work, "wh"), "commit_store": commit_store, "durability": DURABILITY[0]}
    ns = lance_namespace.connect("tessera", props)
    stack.callback(ns.close)
    return _through(ns)


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


def setup_rest(stack: contextlib.ExitStack, work: str) -> Append:
    import lance_namespace

    url = stack.enter_context(_server(work))
    return _through(lance_namespace.connect("rest", {"uri": url}))


def setup_tessera_uri(stack: contextlib.ExitStack, work: str) -> Append:
    import tessera

    t = tessera.Table.create(os.path.join(work, "t"), _row(-1), durability=DURABILITY[0])
    return lambda i: t.append(_row(i))


def setup_tessera_rest(stack: contextlib.ExitStack, work: str, served: bool) -> Append:
    import lance
    import lance_namespace

    import tessera

    url = stack.enter_context(_server(work))
    ns = lance_namespace.connect("rest", {"uri": url})
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["b"], mode="exist_ok"))
    lance.write_dataset(_row(-1), namespace_client=ns, table_id=["b", "t"], mode="create")
    t = tessera.Table.open("b.t", namespace=url, durability=DURABILITY[0])
    if not served:
        t._handler.served = None  # commit as pylance does: stage, then create_table_version
    return lambda i: t.append(_row(i))


SETUPS: dict[str, Callable[[contextlib.ExitStack, str], Append]] = {
    "uri": setup_uri,
    "ns-native": lambda st, w: setup_plugin(st, w, "native"),
    "ns-catalog": lambda st, w: setup_plugin(st, w, "catalog"),
    "ns-redis": lambda st, w: setup_plugin(st, w, "redis://127.0.0.1:6379/0"),
    "rest-native": setup_rest,
    "t-uri": setup_tessera_uri,
    "t-served": lambda st, w: setup_tessera_rest(st, w, True),
    "t-managed": lambda st, w: setup_tessera_rest(st, w, False),
}

#: appends timed per mode in turn: every mode meets the machine in the same states
BLOCK = 25


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--only", default=",".join(MODES))
    ap.add_argument("--durability", choices=["sync", "none"], default="sync")
    args = ap.parse_args()
    DURABILITY[0] = args.durability
    modes = [m for m in args.only.split(",") if m]
    unknown = [m for m in modes if m not in SETUPS]
    if unknown:
        raise SystemExit(f"unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}")
    results: dict[str, list[float]] = {m: [] for m in modes}
    with contextlib.ExitStack() as stack:
        appends = {}
        for mode in modes:
            work = tempfile.mkdtemp(prefix=f"bench-ns-{mode}-")
            stack.callback(shutil.rmtree, work, True)
            appends[mode] = SETUPS[mode](stack, work)
        done = 0
        while done < args.commits:
            n = min(BLOCK, args.commits - done)
            for mode in modes:
                for i in range(done, done + n):
                    t0 = time.perf_counter()
                    appends[mode](i)
                    results[mode].append(time.perf_counter() - t0)
            done += n
    base = statistics.median(results["uri"]) if "uri" in results else None
    print(f"{'mode':<12} {'median ms':>10} {'p90 ms':>9} {'vs uri':>8}   ({args.commits} one-row appends each)")
    for mode, times in results.items():
        med = statistics.median(times)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        ratio = f"{med / base:.2f}x" if base else "-"
        print(f"{mode:<12} {med * 1e3:>10.2f} {p90 * 1e3:>9.2f} {ratio:>8}")


if __name__ == "__main__":
    main()
