"""Deliberately wrong captures, written into a patched install's model file (tests and the GPU campaign).

A right patch must pass ``patchkit rehearse`` and a wrong one must fail it, naming the cause. The
wrong ones are what a buggy codemod would have written, made from the bytes patchkit wrote (the
A2/A3 form: ``self._maybe_add_hidden_state(aux_hidden_states, layer_idx + 1, hidden_states, R)`` after
each layer, ``R`` being ``residual`` or, where the layer returns the whole stream, ``None``):

- ``shift``: the state after layer i is labelled i instead of i + 1, so id k receives the stream
  entering layer k + 1 (every capture one layer late);
- ``residual``: on a layer that keeps its own residual, ``hidden_states + residual`` instead of
  ``hidden_states`` (what patchkit wrote for Exaone4 before the residual-stream derivation);
- ``shift-own``: the same one-layer-late capture in vLLM's own loop (``LlamaModel.forward``: ``idx + 1``
  made ``idx``), for an interface-only shape (Glm4), where vLLM's model captures and patchkit writes
  only the interface.

Each mutation demands exactly one match in the file, or raises.
"""

from __future__ import annotations

import os
from pathlib import Path

AFTER_LAYER = "self._maybe_add_hidden_state(aux_hidden_states, layer_idx + 1, hidden_states, "
MUTATIONS = {
    "shift": (AFTER_LAYER, "self._maybe_add_hidden_state(aux_hidden_states, layer_idx, hidden_states, "),
    "residual": (AFTER_LAYER + "None)", AFTER_LAYER + "residual)"),
    "shift-own": (
        "aux_hidden_states, idx + 1, hidden_states, residual\n",
        "aux_hidden_states, idx, hidden_states, residual\n",
    ),
}
"""Per mutation: (the text patchkit wrote, what replaces it)."""


def mutate(model_file: Path, kind: str) -> None:
    """Replace the capture in ``model_file`` with the wrong one named ``kind`` (atomically, a new inode:
    a hard-linked copy of the install elsewhere keeps its bytes).

    Raises:
        ValueError: the text patchkit writes is not in the file exactly once.
    """
    old, new = MUTATIONS[kind]
    text = model_file.read_text()
    if text.count(old) != 1:
        raise ValueError(f"{model_file}: {old!r} found {text.count(old)} times, not once")
    tmp = model_file.with_name(model_file.name + ".wrong")
    tmp.write_text(text.replace(old, new))
    os.replace(tmp, model_file)
