"""EAGLE-3 aux hidden state capture in the DeepSeek-V2/V3 backbone (``DeepseekV2Model``)."""

from patchkit.codemods import CodemodRef
from patchkit.vllm.release.contract import A1_RELEASES, NATIVE_FROM
from patchkit.plan.spec import ClassTarget, Patch

PATCH = Patch(
    id="eagle3-deepseek-backbone",
    summary="DeepseekV2Model captures the residual stream entering each requested layer (EAGLE-3 aux hidden states)",
    why=(
        "EAGLE-3 drafts read hidden states from three target layers. The DeepSeek backbone's forward "
        "returns only the final normed state, so the runner has nothing to feed the draft. The capture "
        "takes hidden_states + residual entering layer k (global ids, from start_layer), the final layer "
        "output for id n, and returns (hidden_states, aux_hidden_states) only when ids were requested."
    ),
    reference=(
        f"vllm-project/vllm, native from v{NATIVE_FROM} (model_executor/models/deepseek_v2.py); "
        "final-layer capture: #46788"
    ),
    vllm=A1_RELEASES,
    upstream_from=NATIVE_FROM,
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
    target=ClassTarget(architecture="DeepseekV2ForCausalLM", held=("model",)),
    codemod=CodemodRef.of("capture", patch_id="eagle3-deepseek-backbone", form="inline", residual=True),
)
