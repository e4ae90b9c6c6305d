"""Allocator settings for the Python workers that run Spark tasks.

Encoding and decoding a page allocate and free arrays of a few MiB to a few
tens of MiB many times over.  glibc's malloc gives large blocks back to the
kernel (``munmap``, or trimming the top of the heap) as soon as they are
freed, so the next page's arrays fault fresh zeroed pages in again: about
24,000 faults, 0.045 CPU-seconds of kernel time, per 1.25 million rows
written, a quarter of a write task's own work on a small machine.

:func:`keep_freed_memory` raises glibc's thresholds once per process so freed
blocks are reused instead: blocks up to ``mmap_threshold`` come from the heap
and up to ``trim_threshold`` of free heap is kept.  The process's resident
memory can therefore stay up to about ``trim_threshold`` above what it
uses.  It only affects the worker processes Spark starts for Tessera's tasks
(the functions are called from task code), is a no-op where the C library is
not glibc, and is switched off with the environment variable
``TESSERA_KEEP_FREED_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

#: mallopt parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD = 128 << 20

_done: bool | None = None


def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Apply the settings once per process; True when they are in effect."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("TESSERA_KEEP_FREED_MEMORY", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1 and mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1
    if not ok:
        log.debug("mallopt refused the thresholds; the allocator keeps its defaults")
    _done = ok
    return ok
