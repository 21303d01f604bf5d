"""Read-only facts about an installed vLLM release, read from its files without importing it.

The facts stand in wings, one question each; a wing imports only the wings below it
(``tests/test_layout.py``, docs/development.md "The vLLM wings"):

- :mod:`.release`: where the install is, how its files are read, its EAGLE-3 contract and release boundaries;
- :mod:`.registry`: which class serves an architecture; :mod:`.runner`: what the model runner and the
  EAGLE proposer read from the target;
- :mod:`.classes`: what a model class holds and runs; :mod:`.plugins`: vLLM's entry-point groups;
- :mod:`.stream`: which tensor is captured; :mod:`.checkpoints`: what a checkpoint holds, how a draft is read;
- :mod:`.chain`: the chain check, link by link; :mod:`.shapes`: an architecture's shape, and what is shown.

Nothing here writes a file or imports from another patchkit subpackage above it.
"""
