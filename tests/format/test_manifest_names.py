"""Manifest file names in ``_versions/``: what counts as a version, and small
encoder helpers whose fast paths must agree with their plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.format.file.encodings import fastlanes
from tessera.format.file.v21.write.bitpack import _bit_widths
from tessera.format.table.manifest import (
    MixedNamingError,
    NamingScheme,
    manifest_name,
    parse_manifest_name,
    scan_versions,
)


@pytest.mark.parametrize("version", [1, 2, 9, 10, 12345, 2**40])
@pytest.mark.parametrize("scheme", [NamingScheme.V1, NamingScheme.V2])
def test_names_round_trip(version, scheme):
    assert parse_manifest_name(manifest_name(version, scheme)) == (version, scheme)


@pytest.mark.parametrize(
    "name",
    [
        "latest_version_hint.json",
        "18446744073709551613.manifest-0f3c",  # staged by an external store
        "18446744073709551613.manifest.abc.staging",
        "d9223372036854775809.manifest",  # detached
        ".manifest",
        "x1.manifest",
        "+1.manifest",
        " 1.manifest",
        "１.manifest",  # a full-width digit: int() would read it as 1
        "١٢.manifest",  # Arabic-Indic digits
    ],
)
def test_other_names_are_not_versions(name):
    assert parse_manifest_name(name) is None
    assert scan_versions([name, manifest_name(3)]) == ({3: manifest_name(3)}, NamingScheme.V2)


def test_scan_versions_refuses_mixed_naming():
    with pytest.raises(MixedNamingError):
        scan_versions([manifest_name(1, NamingScheme.V1), manifest_name(2, NamingScheme.V2)])


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@pytest.mark.parametrize("n", [0, 1, 7, 16, 17, 300])
def test_bit_widths_are_bit_lengths(bits, n):
    rng = np.random.default_rng(bits * 1000 + n)
    dtype = np.dtype(f"u{bits // 8}")
    x = rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype, endpoint=True) >> rng.integers(0, bits, n).astype(dtype)
    x[: min(n, 3)] = [0, 1, np.iinfo(dtype).max][: min(n, 3)]
    assert _bit_widths(x, bits).tolist() == [int(v).bit_length() for v in x.tolist()]


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_pack_matches_the_row_by_row_definition(bits):
    """pack (vectorized) against FastLanes' layout written out row by row."""
    rng = np.random.default_rng(bits)
    dtype = np.dtype(f"u{bits // 8}")
    lanes = fastlanes.BLOCK_VALUES // bits
    for width in range(bits + 1):
        top = (1 << width) - 1
        v = (rng.integers(0, np.iinfo(dtype).max, 2048, dtype=dtype, endpoint=True) & dtype.type(top)).astype(dtype)
        words = np.zeros((2, width, lanes), dtype=dtype)
        blocks = v.reshape(2, fastlanes.BLOCK_VALUES)
        for r in range(bits):
            w0, shift = divmod(r * width, bits)
            base = fastlanes._row_base(r)
            src = blocks[:, base : base + lanes]
            if width:
                words[:, w0, :] |= src << dtype.type(shift)
                if shift + width > bits:
                    words[:, w0 + 1, :] |= src >> dtype.type(bits - shift)
        want = words.astype(dtype.newbyteorder("<")).tobytes()
        assert fastlanes.pack(v, width) == want, width
        assert np.array_equal(fastlanes.unpack(want, width, bits, 2), v if width else np.zeros_like(v))


def _brute_latest(names):
    versions, scheme = scan_versions(names)
    return (max(versions), versions[max(versions)], scheme) if versions else None


@pytest.mark.parametrize(
    "names",
    [
        [],
        ["latest_version_hint.json"],
        [manifest_name(v) for v in range(1, 40)],
        [manifest_name(v) for v in (3, 1, 2)] + ["latest_version_hint.json", manifest_name(9) + "-0f3c"],
        [manifest_name(v) for v in (1, 2)] + ["d9223372036854775809.manifest", "x" * 20 + ".manifest"],
        [manifest_name(v, NamingScheme.V1) for v in range(1, 12)] + ["latest_version_hint.json"],
        ["１.manifest", manifest_name(4)],  # not a V1 name: the V2 fast path stays right
        [manifest_name(2**63, NamingScheme.V2), manifest_name(5)],
    ],
)
def test_latest_manifest_agrees_with_a_full_scan(names):
    from tessera.format.table.manifest import latest_manifest

    assert latest_manifest(names) == _brute_latest(names)


@pytest.mark.parametrize("after", [0, 1, 2, 3, 8, 39, 40, 2**63 - 1])
@pytest.mark.parametrize(
    "names",
    [
        [],
        [manifest_name(v) for v in range(1, 40)] + ["latest_version_hint.json", manifest_name(9) + "-0f3c"],
        [manifest_name(v) for v in (9, 1, 3, 40)],  # holes: versions cleaned up
        [manifest_name(v, NamingScheme.V1) for v in range(1, 12)] + ["latest_version_hint.json"],
        ["１.manifest", manifest_name(4), "x" * 20 + ".manifest"],
        [manifest_name(2**63, NamingScheme.V2), manifest_name(5)],
    ],
)
def test_versions_newer_agrees_with_a_full_scan(names, after):
    from tessera.format.table.manifest import versions_newer

    versions, _ = scan_versions(names)
    assert versions_newer(names, after) == sorted(v for v in versions if v > after)


def test_versions_newer_refuses_mixed_naming():
    from tessera.format.table.manifest import versions_newer

    with pytest.raises(MixedNamingError):
        versions_newer([manifest_name(1, NamingScheme.V1), manifest_name(2, NamingScheme.V2)], 1)


def test_latest_manifest_refuses_mixed_naming():
    from tessera.format.table.manifest import latest_manifest

    with pytest.raises(MixedNamingError):
        latest_manifest([manifest_name(1, NamingScheme.V1), manifest_name(2, NamingScheme.V2)])
