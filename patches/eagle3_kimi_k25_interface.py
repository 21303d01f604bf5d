"""``SupportsEagle3`` on the Kimi-K2.5 wrapper, forwarding to whatever ``language_model`` holds."""

from packaging.specifiers import SpecifierSet

from patchkit.codemods import CodemodRef
from patchkit.plan.spec import ClassTarget, Patch

PATCH = Patch(
    id="eagle3-kimi-k25-interface",
    summary="KimiK25ForConditionalGeneration implements SupportsEagle3, forwarding to its language_model",
    why=(
        "KimiK25ForConditionalGeneration does not inherit from DeepSeek: it holds the language model in "
        "self.language_model (a bare DeepseekV2Model on 0.15.1, a registry-built DeepseekV2ForCausalLM "
        "on 0.16 and 0.17). Patching DeepSeek alone leaves the wrapper failing supports_eagle3. The "
        "methods are generated for what this release's __init__ actually assigns."
    ),
    reference="vllm-project/vllm, native from v0.18.0 (model_executor/models/kimi_k25.py); #35966",
    vllm=SpecifierSet(">=0.15.1,<0.18.0", prereleases=True),
    upstream_from="0.18.0",
    architectures=("KimiK25ForConditionalGeneration",),
    target=ClassTarget(architecture="KimiK25ForConditionalGeneration", forwards_to="language_model"),
    codemod=CodemodRef.of("interface", patch_id="eagle3-kimi-k25-interface", methods=True),
    requires=("eagle3-deepseek-interface",),
)
