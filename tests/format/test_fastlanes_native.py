"""The C accelerator of FastLanes (``_fastlanes.c``) packs and decodes exactly
what the numpy path packs and decodes: every type width and bit width, consecutive
blocks and blocks at offsets of mixed widths, unaligned buffers; and it
refuses sizes and offsets outside its buffers with ValueError (which the page
decoders report as a corrupt file), never reading past them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tessera.format.file.encodings import fastlanes as fl

native = fl.native
if native is None and os.environ.get("CI") == "true":
    raise RuntimeError("the C accelerator was not built (no C compiler?): CI must test it")
pytestmark = pytest.mark.skipif(native is None, reason="the C accelerator was not built")

rng = np.random.default_rng(3)


def _values(T: int, W: int, n: int) -> np.ndarray:
    if W == 64:
        return rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    return rng.integers(0, 1 << W, n, dtype=np.uint64).astype(f"u{T // 8}")


@pytest.mark.parametrize("T", fl.TYPE_BITS)
def test_every_width_decodes_as_the_numpy_path(T):
    for W in range(1, T + 1):
        for blocks in (1, 3):
            vals = _values(T, W, blocks * 1024).astype(f"u{T // 8}")
            packed = fl.pack(vals, W)
            words = np.frombuffer(packed, dtype=f"<u{T // 8}").reshape(blocks, W, 1024 // T)
            by_numpy = np.empty((blocks, 1024), dtype=f"u{T // 8}")
            fl._unpack_into_numpy(words, by_numpy, W, T)
            by_c = np.empty((blocks, 1024), dtype=f"u{T // 8}")
            native.unpack(memoryview(b"\0" + packed)[1:], by_c, T, W, blocks)  # an unaligned buffer
            assert np.array_equal(by_c.reshape(-1), vals), (T, W)
            assert np.array_equal(by_numpy, by_c), (T, W)


@pytest.mark.parametrize("T", fl.TYPE_BITS)
def test_blocks_at_offsets_of_mixed_widths_decode_as_the_numpy_path(T, monkeypatch):
    widths = rng.integers(0, T + 1, 40)
    parts, starts, want, at = [], [], [], 0
    for W in widths.tolist():
        gap = bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))  # headers between blocks
        vals = _values(T, W, 1024).astype(f"u{T // 8}") if W else np.zeros(1024, f"u{T // 8}")
        body = fl.pack(vals, W) if W else b""
        parts += [gap, body]
        at += len(gap)
        starts.append(at)
        at += len(body)
        want.append(vals)
    data = b"".join(parts)
    by_c = fl.unpack_blocks_at(data, starts, widths, T)
    monkeypatch.setattr(fl, "native", None)
    by_numpy = fl.unpack_blocks_at(data, starts, widths, T)
    assert np.array_equal(by_c, np.concatenate(want))
    assert np.array_equal(by_c, by_numpy)


@pytest.mark.parametrize("T", fl.TYPE_BITS)
def test_every_width_packs_as_the_numpy_path(T, monkeypatch):
    for W in range(1, T + 1):
        vals = _values(T, W, 3 * 1024).astype(f"u{T // 8}")
        by_c = fl.pack(vals, W)
        with monkeypatch.context() as m:
            m.setattr(fl, "native", None)
            by_numpy = fl.pack(vals, W)
        assert by_c == by_numpy, (T, W)
        signed = vals.view(f"i{T // 8}")  # signed values are packed as their unsigned bits
        if W < T or T == 64:
            assert fl.pack(signed, W) == by_c


def test_pack_refuses_what_does_not_fit():
    vals = np.arange(1024, dtype=np.uint32)
    with pytest.raises(ValueError, match="does not fit"):
        fl.pack(vals, 9)
    with pytest.raises(ValueError, match="too short"):
        native.pack(vals, bytearray(128 * 10 - 1), 32, 10, 1)
    with pytest.raises(ValueError, match="too short"):
        native.pack(vals[:1000], bytearray(128 * 10), 32, 10, 1)
    with pytest.raises(ValueError, match="aligned"):
        native.pack(memoryview(b"\0" + vals.tobytes())[1:], bytearray(128 * 10), 32, 10, 1)
    with pytest.raises(ValueError, match="outside"):
        native.pack(vals, bytearray(128 * 40), 32, 33, 1)


def test_sizes_and_offsets_outside_the_buffers_are_refused():
    packed = fl.pack(np.arange(1024, dtype=np.uint32), 10)
    out = np.empty(1024, dtype=np.uint32)
    with pytest.raises(ValueError, match="too short"):
        native.unpack(packed[:-1], out, 32, 10, 1)
    with pytest.raises(ValueError, match="too short"):
        native.unpack(packed, out[:-1], 32, 10, 1)
    with pytest.raises(ValueError, match="bit width"):
        native.unpack(packed, out, 32, 33, 1)
    with pytest.raises(ValueError, match="type width"):
        native.unpack(packed, out, 24, 10, 1)
    one = np.array([1], dtype=np.int64)
    for start, width in ((1, 10), (-1, 10), (0, 33), (0, -1), (len(packed) + 5, 0)):
        with pytest.raises(ValueError):
            native.unpack_at(packed, np.array([start], dtype=np.int64), np.array([width], dtype=np.int64), out, 32)
    with pytest.raises(ValueError, match="same length"):
        native.unpack_at(packed, np.array([0, 0], dtype=np.int64), one, out, 32)
    with pytest.raises(ValueError, match="too short"):
        native.unpack_at(packed, np.array([0], dtype=np.int64), np.array([10], dtype=np.int64), out[:10], 32)
    with pytest.raises(TypeError):
        native.unpack(packed, b"read-only", 32, 10, 1)
    # a corrupt width in a page is a ValueError from unpack_blocks_at, as from the numpy path
    with pytest.raises(ValueError):
        fl.unpack_blocks_at(packed, [0], [40], 32)
