"""The shape wing: what patchkit can do for an architecture, and what has been shown to keep its output.

- :mod:`.classify`: an architecture's EAGLE-3 shape (native, declared but broken, patchable, refused).
- :mod:`.shown`: which shapes have been shown lossless under each runner generation.
"""
