"""The start-up guard: a plugin written into the target environment (:mod:`.guard`) whose code
(:mod:`.guard_plugin`, standard library only) refuses a vLLM whose patch was dropped."""
