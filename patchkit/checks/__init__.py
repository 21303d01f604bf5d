"""Checks of an installed release: verify (:mod:`.verify`, which runs the chain check of
:mod:`patchkit.vllm.chain`), the runtime tier (:mod:`.runtime`, whose script
:mod:`.probe` runs in the target interpreter), doctor, the draft checks and scan."""
