"""``python -m tessera.catalog.cli``: the ``tessera`` command."""

from . import main

main()
