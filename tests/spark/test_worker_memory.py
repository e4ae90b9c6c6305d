"""tessera.catalog.spark.worker_memory: Spark task workers keep freed memory for reuse."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a page's temporaries: arrays of 8 to 30 MiB alive at once, then freed, 40 times;
# count the page faults of the last 30 rounds
PROBE = r"""
import json, resource, sys
import numpy as np
from tessera.catalog.spark.worker_memory import keep_freed_memory
on = keep_freed_memory()
for i in range(40):
    if i == 10:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(mib << 20, dtype=np.uint8) for mib in (8, 16, 8, 30)]
    del arrays
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"on": on, "again": keep_freed_memory(), "faults": faults}))
"""


def _probe(**env) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env={**os.environ, **env}, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    on = _probe()
    off = _probe(TESSERA_KEEP_FREED_MEMORY="0")
    assert on["on"] and on["again"] and not off["on"] and not off["again"]
    pages = 30 * (8 + 16 + 8 + 30) * 256  # pages touched by the 30 counted rounds
    assert off["faults"] > pages // 20  # glibc gives some blocks back and faults them in again (~13% here)
    assert on["faults"] < pages // 200  # with the thresholds raised, the freed memory is reused (0 here)
