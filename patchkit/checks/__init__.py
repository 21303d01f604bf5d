"""Checks of an installed release: the chain check after patching (:mod:`.verify`, with its
platform branches in :mod:`.platforms`), the runtime tier (:mod:`.runtime`, whose script
:mod:`.runtime_probe` runs in the target interpreter), doctor, the draft checks and scan."""
