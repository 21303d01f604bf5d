"""``python -m patchkit``: the same as the ``patchkit`` command."""

from patchkit.cli import main

main()
