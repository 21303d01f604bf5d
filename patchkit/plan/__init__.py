"""Planning: what to change in an installed release, decided before anything is written.

The patch values (:mod:`.spec`), the per-architecture patches (:mod:`.arch_patches`), which
architectures a request covers (:mod:`.arch_scope`), the engine that turns patches into new file
bytes (:mod:`.engine`), how each outcome is settled (:mod:`.outcomes`) and what is missing
(:mod:`.missing`).
"""
