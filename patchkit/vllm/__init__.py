"""Read-only facts about an installed vLLM release, read from its files without importing it.

Where the install is (:mod:`.install`), how its files are read (:mod:`.source`), what its model
registry says (:mod:`.registry`), every name and era patchkit relies on (:mod:`.contract`), how
classes compose (:mod:`.composition`), which EAGLE-3 shape a class has (:mod:`.shapes`), which
tensor is the residual stream (:mod:`.stream`), the proposer's paths (:mod:`.runner`),
which file Python would load (:mod:`.loadpath`), and what a checkpoint or the environment's
transformers say (:mod:`.checkpoint`, :mod:`.model_types`, :mod:`.vocabulary`).
Nothing here writes a file or imports from another patchkit subpackage above it.
"""
