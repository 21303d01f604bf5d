"""Planning: what to change in an installed release, decided before anything is written.

The patch values (:mod:`.spec`), what a command was asked about (:mod:`.request`), the patches a
request needs (:mod:`.selection`) and per architecture (:mod:`.arch_patches`), which architectures
the journal's patches serve (:mod:`.arch_scope`), the engine that turns patches into new file bytes
(:mod:`.engine`), the gates between planning and writing (:mod:`.gates`), how each outcome is
settled (:mod:`.outcomes`), what is missing (:mod:`.missing`), and what each journaled file holds and
what ``revert`` does with it (:mod:`.file_states`, :mod:`.revert_plan`).
"""
