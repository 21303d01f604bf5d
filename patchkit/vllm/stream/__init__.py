"""The stream wing: which tensor a target captures for EAGLE-3, and whether its layers keep it lossless.

- :mod:`.residual`: the residual stream entering a decoder layer.
- :mod:`.split`: the same for a layer whose input norm the backbone runs apart.
- :mod:`.aux_defaults`: the aux layer ids a release captures when the draft records none.
- :mod:`.hybrids`: whether each mixer layer kind of a hybrid stays lossless under speculative decoding.
"""
