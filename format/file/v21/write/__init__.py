"""The write side of file formats 2.1/2.2, mirroring :mod:`..read`.

:mod:`.encoder` writes one top-level field: :mod:`.repdef` shreds it into
levels, :mod:`.values` holds its leaf values, :mod:`.miniblock` and
:mod:`.fullzip` lay out its pages, with the value encodings :mod:`.bitpack`,
:mod:`.rle` and :mod:`.dictionary`.
"""
