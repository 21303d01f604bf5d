"""``SupportsEagle3`` and its two methods on ``DeepseekV2ForCausalLM`` (V3 and aliases inherit it)."""

from patchkit.codemods import CodemodRef
from patchkit.vllm.release.contract import A1_RELEASES, NATIVE_FROM
from patchkit.plan.spec import ClassTarget, Patch

PATCH = Patch(
    id="eagle3-deepseek-interface",
    summary="DeepseekV2ForCausalLM implements SupportsEagle3 (set/get aux hidden state layers)",
    why=(
        "vLLM's runner asks supports_eagle3(model) and otherwise fails with 'Model does not support "
        "EAGLE3 interface but aux_hidden_state_outputs was requested'. The Protocol's methods are stubs "
        "returning None, so the class needs real ones: the setter sets the backbone's "
        "aux_hidden_state_layers, the getter returns the default ids (2, n // 2, n - 3). "
        "DeepseekV3ForCausalLM, DeepseekForCausalLM and the registry's aliases inherit the change."
    ),
    reference=f"vllm-project/vllm, native from v{NATIVE_FROM}; the Protocol: #22642",
    vllm=A1_RELEASES,
    upstream_from=NATIVE_FROM,
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
    target=ClassTarget(architecture="DeepseekV2ForCausalLM", forwards_to="model"),
    codemod=CodemodRef.of("interface", patch_id="eagle3-deepseek-interface", methods=True),
    requires=("eagle3-deepseek-backbone",),
)
