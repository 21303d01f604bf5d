"""Every SGLang name patchkit's SGLang wing relies on, each with the file, function and releases it was read from.

Read on the wheels of SGLang 0.5.14, 0.5.16 and 0.5.23 (``pip download --no-deps sglang==X``); nothing here imports
SGLang. A release number in a code line would be written here only (``tests/test_layout.py``, rule 5); none is needed
yet: what differs between these releases is read from the files, not switched on the version.
"""

from __future__ import annotations

QUALIFIED = ("0.5.14", "0.5.16", "0.5.23")
"""The SGLang releases whose files every fact below was read on and the patch was qualified on (README, issue 44)."""

DISTRIBUTION = "sglang"
"""The ``--target`` name, and the distribution (``sglang-X.Y.Z.dist-info``) on PyPI."""

ENGINE = "SGLang"
"""The engine's name in messages (the shared journal's hints: ``JournalRecords``'s ``engine``, ``patchkit/store``)."""

PACKAGE = "sglang"
"""The top-level import package the distribution owns (its ``top_level.txt``)."""

MODELS_PACKAGE = "sglang.srt.models"
"""The package SGLang's registry walks: ``sglang/srt/models/registry.py``, at module level
``ModelRegistry.register("sglang.srt.models")``, which calls ``import_model_classes``: ``pkgutil.iter_modules``
over the package's folder, plain modules only (``ispkg`` skipped), each imported and its ``EntryClass`` read
(0.5.14, 0.5.16, 0.5.23)."""

ENTRY = "EntryClass"
"""The module-level name each model module registers with: ``EntryClass = X`` or ``EntryClass = [X, Y]``. The registry
keys each class by its ``__name__`` (``import_model_classes``: ``model_arch_name_to_cls[tmp.__name__] = tmp``), so an
alias or an imported class registers under its own class name."""

CAPTURE_SETTER = "set_eagle3_layers_to_capture"
"""What makes a class EAGLE-3-capable to SGLang: the model runner raises ``ValueError`` unless
``hasattr(model, "set_eagle3_layers_to_capture")`` (0.5.23: ``sglang/srt/model_executor/model_runner_components/
attention_backend_setup.py``, ``configure_aux_hidden_state_capture``), then calls it with the layer ids; 0.5.16
(the same function) and 0.5.14 (``sglang/srt/model_executor/model_runner.py``) call it without asking, so a class
without it fails there with ``AttributeError``."""

EMBED_AND_HEAD = "get_embed_and_head"
"""What the EAGLE draft shares from the target (0.5.23: ``sglang/srt/speculative/pp_draft_embedding.py``,
``resolve_target_embed_and_head`` returns ``target_model.get_embed_and_head()``)."""

CAPTURE_FLAG = "capture_aux_hidden_states"
"""The attribute ``set_eagle3_layers_to_capture`` turns on in the native classes (``sglang/srt/models/llama.py``,
``LlamaForCausalLM``), read by their ``forward`` to unpack ``(hidden_states, aux_hidden_states)``."""

LAYERS_TO_CAPTURE = "layers_to_capture"
"""The inner model's list of layer ids to capture (``llama.py``, ``LlamaModel.__init__``:
``self.layers_to_capture = []``)."""

GENERATION_CONFIG = ("srt", "configs", "model_config.py")
"""Where SGLang decides which architectures are not generative, below the package folder (0.5.14 to 0.5.23)."""

GENERATION_FUNCTION = "is_generation_model"
"""The function there: ``return False`` when one of the architecture names it tests with ``"X" in model_architectures``
is the model's (embedding, reward and classification models), else generative unless ``--is-embedding``."""

POOLER = "pooler"
"""The attribute a pooling model's class sets (``self.pooler = Pooler(...)``: ``bert.py``,
``qwen3_classification.py``)."""

LOGITS = "logits_processor"
"""The attribute a generative class sets (``self.logits_processor = LogitsProcessor(config)``: ``llama.py``)."""

DRAFT_INPUT = ("spec_info", "hidden_states")
"""What a draft model reads: the target's hidden states handed to it, ``forward_batch.spec_info.hidden_states``
(``llama_eagle3.py``, ``LlamaModel.forward``; ``deepseek_nextn.py``; every ``*_mtp.py`` and ``*_nextn.py`` of 0.5.23).
A registered class that reads it (itself, or a model it builds) is a draft, not a target."""

DRAFT_METHOD = "project_target_hidden"
"""What a DFlash or DSpark draft defines: it projects the target's hidden states handed to it (0.5.23: ``dflash.py``,
``DFlashDraftModel.project_target_hidden``; ``dspark.py``'s classes inherit it). A class whose lineage defines it is a
draft."""

APPEND_LIST = "aux_hidden_states"
"""Capture idiom 1, a list appended to in the decoder loop: ``aux_hidden_states.append(hidden_states + residual)``
when ``i in self.layers_to_capture`` (0.5.23: ``gemma3_causal.py``, ``longcat_flash.py``; 0.5.14: ``llama.py``)."""

CAPTURE_KEYWORDS = ("capture_output", "captured_last_layer_outputs")
"""Capture idiom 2, the ``AuxHiddenStateList`` / ``capture_output`` boundary: the loop passes
``capture_output=aux_hidden_states.capture`` (or the accumulator as ``captured_last_layer_outputs=``) to the layers
in ``layers_to_capture`` (0.5.23: ``llama.py``, ``qwen2.py``, ``deepseek_v2.py``; ``sglang/srt/layers/
aux_hidden_states.py`` defines ``AuxHiddenStateList``)."""

ACCUMULATORS = ("AuxHiddenStateList", "AuxHiddenStatePacker")
"""The accumulator classes of idiom 2 (``sglang/srt/layers/aux_hidden_states.py``, 0.5.23)."""

LAYER_FLAG = "_is_layer_to_capture"
"""Capture idiom 3, per-layer flags: ``set_eagle3_layers_to_capture`` sets ``layer._is_layer_to_capture = True`` and the
loop reads the flag (0.5.23: ``qwen3_moe.py``, ``minimax_m3.py``, ``qwen2_moe.py``)."""

REFERENCE_MODULE = "sglang.srt.models.llama"
"""The module whose native classes a patch copies its statements from (``apply --target sglang``): the release's own
Llama, native in 0.5.14, 0.5.16 and 0.5.23, so the capture a patch writes is the idiom of the installed release, read
from its files, never switched on the version."""

REFERENCE_CLASSES = ("LlamaForCausalLM", "LlamaModel", "LlamaDecoderLayer")
"""The wrapper, the backbone and the decoder layer of :data:`REFERENCE_MODULE` (``llama.py``): the wrapper builds the
backbone as ``self.model`` (``_init_model``), the backbone's ``forward`` loops over ``self.layers[i]`` for
``i in range(self.start_layer, self.end_layer)``; 0.5.23's layer takes ``capture_output=None`` and hands
``capture=capture_output`` to ``self.attn_boundary.prepare``."""

ID_SHIFT = 1
"""What the reference wrapper's ``set_eagle3_layers_to_capture`` adds to each draft id (``llama.py``,
``LlamaForCausalLM``: ``[val + 1 for val in layer_ids]``; its loop captures before layer ``i``, the output of layer
``i - 1``; 0.5.14, 0.5.16, 0.5.23). A patch copies that setter with that loop, so a release whose Llama maps ids
otherwise is not what the patch was qualified on: apply refuses and verify says not checked
(:func:`patchkit.sglang.drafts.reference_shift`)."""

LAYER_RANGE = ("start_layer", "end_layer")
"""The backbone's loop bounds, ``for i in range(self.start_layer, self.end_layer)`` (``llama.py``,
``LlamaModel.forward``; ``mixtral.py``, ``MixtralModel.forward``; 0.5.14 to 0.5.23)."""

ATTN_BOUNDARY = ("attn_boundary", "prepare")
"""0.5.23's layer boundary that takes the capture: ``self.attn_boundary.prepare(hidden_states, forward_batch,
capture=capture_output)`` (``llama.py``, ``LlamaDecoderLayer.forward``; ``sglang/srt/layers/layer_boundary/``)."""

LOGITS_ARGS = 4
"""The positional arguments of a wrapper's ``self.logits_processor(input_ids, hidden_states, self.lm_head,
forward_batch)``; the native wrapper passes ``aux_hidden_states`` as the fifth (``llama.py``,
``LlamaForCausalLM.forward``; ``sglang/srt/layers/logits_processor.py``, ``LogitsProcessor.forward``'s
``aux_hidden_states`` parameter)."""

PP_GROUP = "pp_group"
"""The pipeline-parallel group a class keeps (``self.pp_group = get_pp_group()``: ``llama.py``,
``LlamaForCausalLM.__init__``). Llama's setter starts with the guard ``if not self.pp_group.is_last_rank: return``;
the natives that never name it write the setter without that one statement (0.5.14, 0.5.16, 0.5.23:
``gemma3_causal.py``, ``Gemma3ForCausalLM.set_eagle3_layers_to_capture``)."""
