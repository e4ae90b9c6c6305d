"""A local file read by several threads while one of them maps it: the
descriptor is never closed under a read (its number could name another file)."""

from __future__ import annotations

import os
import threading

from tessera.format.file.io import LocalFileReader


def test_reads_racing_the_switch_to_a_mapping(tmp_path):
    data = os.urandom(4 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    errors: list[BaseException] = []
    for _ in range(20):
        r = LocalFileReader(path)
        go = threading.Barrier(5)

        def small(r=r, go=go) -> None:
            go.wait()
            try:
                for k in range(200):
                    off = (k * 7919) % (len(data) - 64)
                    (buf,) = r.read_ranges([(off, 64)])
                    assert buf.to_pybytes() == data[off : off + 64]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def big(r=r, go=go) -> None:
            go.wait()
            try:
                (buf,) = r.read_ranges([(0, 2 << 20)])  # large: maps the file, retiring the descriptor
                assert buf.to_pybytes() == data[: 2 << 20]
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=small) for _ in range(4)] + [threading.Thread(target=big)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        r.close()
    assert not errors, errors[:3]


def test_the_descriptor_outlives_the_reads_using_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 16))
    r = LocalFileReader(path)
    fd = r._use_fd()  # a read is under way on another thread
    assert fd is not None
    r.map()  # a large read switches to the mapping meanwhile
    os.fstat(fd)  # still open: the running pread reads this file, not whatever opens next
    r.close()
    os.fstat(fd)
    r._done_fd()  # the last read using it closes it
    try:
        os.fstat(fd)
        still_open = True
    except OSError:
        still_open = False
    assert not still_open
