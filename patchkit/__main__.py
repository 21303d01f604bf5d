"""``python -m patchkit``: the same as the ``patchkit`` command (:mod:`patchkit.entry`)."""

from patchkit.entry import main

main()
