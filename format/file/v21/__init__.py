"""File formats 2.1 and 2.2: structural layouts (mini-block, full-zip,
all-null/constant) with repetition and definition levels.

A struct or list parent owns no column: its validity and offsets are folded
into the repetition/definition levels of each leaf below it.

:mod:`.read` decodes pages (its :mod:`~.read.decoder` reads one field) and
:mod:`.write` encodes them (its :mod:`~.write.encoder` writes one field); the
two sides mirror each other module by module (``miniblock``, ``fullzip``,
``repdef``, ``values``).
"""

from __future__ import annotations

from ..schema import LanceField


def num_columns(field: LanceField) -> int:
    """Columns a top-level field occupies: one per leaf, a packed struct
    (field metadata ``lance-encoding:packed``) counting as one leaf."""
    return sum(1 for _ in field.leaves())


def __getattr__(name: str):
    # The encoder and decoder are separate modules; import them on first use,
    # then keep them as this module's attributes (asked once per file read:
    # this function is not called again)
    found: object
    if name == "FieldEncoder":
        from .write import encoder

        found = encoder.FieldEncoder
    elif name == "FieldDecoder":
        from .read import decoder

        found = decoder.FieldDecoder
    else:
        raise AttributeError(name)
    globals()[name] = found
    return found
