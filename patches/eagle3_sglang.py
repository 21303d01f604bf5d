"""EAGLE-3 for SGLang generative classes of the standard shape that lack it (issue 44).

A declarative value: what it is, what it copies, where it applies. The shape it needs and what it writes are the
codemod's (:mod:`patchkit.codemods.sglang_capture`); the statements come from the installed release's own
``sglang/srt/models/llama.py`` (:mod:`patchkit.codemods.sglang_reference`), so one definition serves the list-append
releases (0.5.14, 0.5.16) and the capture-boundary one (0.5.23). Qualified on those three wheels' files.
"""

from patchkit.plan.sglang_apply import SglangPatch
from patchkit.sglang import contract as c

SGLANG_PATCH = SglangPatch(
    id="eagle3-sglang-capture",
    reference=(c.REFERENCE_MODULE, c.REFERENCE_CLASSES),
    codemod="patchkit.codemods.sglang_capture",
    summary=(
        "layers_to_capture and the loop's capture on the backbone; the flag, the unpack and the logits processor's "
        "aux argument on the wrapper; set_eagle3_layers_to_capture and get_embed_and_head, as the release's llama.py"
    ),
    upstream="sglang/srt/models/llama.py (LlamaModel, LlamaForCausalLM): the native classes the patch copies",
)
