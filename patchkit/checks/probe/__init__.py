"""Runtime probe: asks the installed vLLM itself whether EAGLE-3 is in effect. Run by ``verify --runtime``.

This folder is executed as a script by the *target* interpreter (the environment that serves the
model), in a fresh subprocess, never inside patchkit's own process: :mod:`patchkit.checks.runtime`
runs ``<python> <this folder> <JSON>``, so Python runs ``__main__.py`` with this folder first on
``sys.path`` and its modules import each other by their plain names (``probe_standins``, ...; the
``probe_`` prefix keeps them from shadowing anything the environment has). It imports only the standard
library and what that environment already has (vLLM, torch), and runs on Python 3.8 and later. It must
not import patchkit, and nothing in patchkit imports it. torch and vLLM are imported inside the
functions that use them, after ``__main__`` has checked they import (else it reports ``fatal``).

Modules:

- ``__main__.py``: reads the input, runs the checks in order, prints the report.
- ``probe_standins.py``: the shared constants and the stand-ins (blank instances, stand-in targets and
  backbones, the catch-all ``_Anything``, ``_Config``, ``_Flag``).
- ``probe_interface.py``: checks 1 - 3 (registry and ``supports_eagle3``, the methods, the speculative config).
- ``probe_forward.py``: check 4 (the backbone's ``forward`` on a stand-in).
- ``probe_loading.py``: checks 5 and 6 (the wrappers' ``forward``, vLLM's draft loading).

Input: one JSON argument::

    {"architectures": ["DeepseekV2ForCausalLM", ...],
     "chains": {"KimiK25ForConditionalGeneration": [["language_model", "mod:Class"], ["model", "mod:Class"]], ...},
     "backbones": {"vllm.model_executor.models.deepseek_v2:DeepseekV2Model": {"residual": true}, ...},
     "getter": "get_eagle3_aux_hidden_state_layers",
     "model_types": ["deepseek_v3", "kimi_k2"],
     "pp_flag": "<patchkit.vllm.release.contract.PP_FLAG>"}

``pp_flag`` is the name of the A3 backbone attribute that says it carries aux states between
pipeline stages (:data:`patchkit.vllm.release.contract.PP_FLAG`; the probe cannot import patchkit).
``getter`` is the release's aux-layer getter (A1: ``get_eagle3_aux_hidden_state_layers``; 0.18.0
on: ``get_eagle3_default_aux_hidden_state_layers``); ``residual`` says whether the stream entering a
layer is ``hidden_states + residual`` (else ``hidden_states`` alone), as patchkit decided it from
the release's code (:func:`patchkit.vllm.stream.residual.residual_stream`): the stand-in layers of check 4 follow
that decision, so check 4 is a consistency check, not independent proof (see :data:`STAND_IN`).

Output: each check also carries ``"basis": "stand-in"`` when it rests on stand-ins.

Output: a line ``PATCHKIT-PROBE-RESULT {"checks": [{"label", "ok", "detail"}, ...]}`` on stdout
(vLLM's own log lines may come before it).

Checks (facts from vLLM 0.10.2 - 0.33.0); 1 and 3 are vLLM's own answers, 2, 4, 5 and 6 are consistency
checks on stand-ins (:data:`STAND_IN`):

1. the registry loads each architecture's class and ``supports_eagle3`` (``interfaces.py``) accepts it;
2. ``set_aux_hidden_state_layers`` / ``get_eagle3_aux_hidden_state_layers`` are not the Protocol's
   stubs, and on a stand-in of the class (its real methods, attributes holding stand-ins of what
   ``__init__`` would build) the setter reaches the backbone and the getter returns
   ``(2, n // 2, n - 3)``;
3. ``SpeculativeConfig._verify_args`` (``config/speculative.py``), vLLM's own start-up
   validation, accepts an EAGLE-3 target whose ``hf_text_config.model_type`` is each model type;
4. the backbone's real (installed) ``forward`` on a tiny stand-in: cheap deterministic decoder
   layers on CPU tensors, pipeline-stage bounds that do not start at 0; each requested id must
   return the residual stream entering that layer (id n: the final output before the norm), in
   layer order, and with no ids the return value must be exactly the unpatched result;
5. each class that holds its backbone (causal LM, multimodal wrapper): its installed ``forward``,
   aux ids set, on a stand-in whose backbone returns a known ``(hidden, aux)`` tuple, must return
   that tuple unchanged (same hidden states, every aux state, in layer order);
6. vLLM's own draft loading, ``EagleProposer.load_model(target)`` (``v1/spec_decode/eagle.py``; from
   0.2x inherited from ``llm_base_proposer.py``), on CPU with a stand-in target and a stand-in
   draft that has no embeddings or head of its own: it must run through, and the draft must end
   up with the target backbone's embedding and the target's head (the very objects). A crash is
   a failed check naming the exception and the vLLM ``file:line`` it was raised at (Kimi-K2.5 on
   0.15.1: ``get_language_model()`` returns a bare backbone, ``AttributeError`` on ``.model``).
"""
