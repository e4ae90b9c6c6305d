"""Output buffers of decoders, allocated from Arrow's memory pool.

A scan returns its decoded values as Arrow arrays and keeps them, so every
output buffer is new memory.  numpy's allocator (the C library's ``malloc``)
hands large blocks back to the system as soon as they are freed, so each
scan touches fresh pages again, and first touches are the costliest part of
writing a large array (several times the cost of the decoding itself on a
virtual machine).  Arrow's pool keeps freed memory for reuse, and the arrays
that Arrow itself builds (``take``, ``concat``) come from it too.

:func:`empty` is ``np.empty`` for buffers that end up in Arrow arrays: a
writable numpy array over pool memory (small ones still come from numpy).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: arrays at least this large come from Arrow's pool
POOL_MIN_BYTES = 1 << 16


def empty(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """A new uninitialised C-contiguous array, large ones in Arrow's pool memory."""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = 1
    for d in dims:
        count *= int(d)
    nbytes = count * dt.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(dims, dtype=dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dtype=dt).reshape(dims)


def zeros(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """:func:`empty`, filled with zeros."""
    out = empty(shape, dtype)
    out.fill(0)
    return out
