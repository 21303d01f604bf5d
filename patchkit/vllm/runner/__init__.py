"""The runner wing: everything patchkit knows about vLLM's model runners, one declaration per generation.

- :mod:`.generations`: the declarations (V1, V2): files, loaders, aux-id setter and reader, the drafter's
  attribute path, the selecting flag.
- :mod:`.serving`: which generation an install serves with, and which declared facts it lacks.
- :mod:`.draft_reads`: the attribute paths the runner and the EAGLE proposer take through the target.
- :mod:`.aux_reads`: where the runner takes the aux-state layer ids from.
"""
