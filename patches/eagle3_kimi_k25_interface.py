"""``SupportsEagle3`` on the Kimi-K2.5 wrapper, forwarding to whatever ``language_model`` holds."""

from patchkit.codemods import CodemodRef
from patchkit.vllm.release.contract import KIMI_K25_FROM, KIMI_K25_LOADABLE_FROM, KIMI_K25_RELEASES, NATIVE_FROM
from patchkit.plan.spec import ClassTarget, Patch

PATCH = Patch(
    id="eagle3-kimi-k25-interface",
    summary="KimiK25ForConditionalGeneration implements SupportsEagle3, forwarding to its language_model",
    why=(
        "KimiK25ForConditionalGeneration does not inherit from DeepSeek: it holds the language model in "
        f"self.language_model (a bare DeepseekV2Model on {KIMI_K25_FROM}, a registry-built DeepseekV2ForCausalLM "
        f"from {KIMI_K25_LOADABLE_FROM}). Patching DeepSeek alone leaves the wrapper failing supports_eagle3. The "
        "methods are generated for what this release's __init__ actually assigns."
    ),
    reference=f"vllm-project/vllm, native from v{NATIVE_FROM} (model_executor/models/kimi_k25.py); #35966",
    vllm=KIMI_K25_RELEASES,
    upstream_from=NATIVE_FROM,
    architectures=("KimiK25ForConditionalGeneration",),
    target=ClassTarget(architecture="KimiK25ForConditionalGeneration", forwards_to="language_model"),
    codemod=CodemodRef.of("interface", patch_id="eagle3-kimi-k25-interface", methods=True),
    requires=("eagle3-deepseek-interface",),
)
