"""The read side of file formats 2.1/2.2: a field's pages decoded to Arrow.

:mod:`.decoder` reads one top-level field; its pages are :mod:`.miniblock`,
:mod:`.fullzip`, :mod:`.constant` (all-null/constant) and :mod:`.blob`, on the
common base of :mod:`.page`; :mod:`.layout` parses the page layouts,
:mod:`.repdef` unravels repetition/definition levels, :mod:`.compressive`
decodes the value encodings and :mod:`.values` turns decoded blocks into Arrow.
"""
