"""``python -m stageline.cli``: the same as the ``stageline`` command."""

from stageline.cli import main

main()
