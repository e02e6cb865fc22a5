"""``python -m stageline``: the same as the ``stageline`` command."""

from stageline.cli import main

main()
