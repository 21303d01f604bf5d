"""The release wing: which vLLM is installed, where its files are, and which EAGLE-3 contract they hold.

- :mod:`.install`: the distribution (``vllm-X.Y.Z.dist-info``) on an interpreter's import path.
- :mod:`.source`: the installed ``vllm`` package as a static tree of modules, classes and imports.
- :mod:`.contract`: the era of the EAGLE-3 contract, every vLLM name patchkit relies on, and the one home
  of release boundaries (``tests/test_layout.py`` enforces it).
"""
