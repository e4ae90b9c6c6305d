"""Regenerate the committed ``*_pb2.py`` modules from ``format/protos/*.proto``.

Run from anywhere: ``python scripts/gen_protos.py``.  Needs grpcio-tools (the
``dev`` extra pins the version, so the output is reproducible).  With
``--check DIR`` it writes into DIR instead, for the staleness test.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(out_dir: str) -> None:
    import grpc_tools
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    protos = sorted(glob.glob(os.path.join("format", "protos", "*.proto")))
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        rc = protoc.main(["protoc", "-I.", f"-I{include}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *protos])
    finally:
        os.chdir(cwd)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    # the modules live in the `tessera` package: protoc names them by their folder
    for path in glob.glob(os.path.join(out_dir, "format", "protos", "*_pb2.py*")):
        with open(path) as f:
            text = f.read()
        fixed = text.replace("from format.protos import", "from tessera.format.protos import")
        if fixed != text:
            with open(path, "w") as f:
                f.write(fixed)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=ROOT, help="output root (default: the repository)")
    args = ap.parse_args()
    generate(os.path.abspath(args.out))
    sys.exit(0)
