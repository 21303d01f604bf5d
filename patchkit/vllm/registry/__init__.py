"""The registry wing: which class serves an architecture, and from where.

- :mod:`.table`: the model registry's rows, resolved to classes.
- :mod:`.platforms`: a registry package's per-platform branches.
- :mod:`.model_types`: an architecture's checkpoint ``model_type`` (the serving environment's transformers).
- :mod:`.transformers_backend`: rows served by vLLM's Transformers backend, and its EAGLE-3 route.
"""
