"""DeepSeek and Kimi model types on the speculative config's EAGLE-3 allow-list."""

from patchkit.codemods import CodemodRef
from patchkit.vllm.release.contract import A1_RELEASES, ALLOW_LIST_MODULES, ALLOW_LIST_NAMES, NATIVE_FROM
from patchkit.plan.spec import ModuleTarget, Patch

PATCH = Patch(
    id="eagle3-allowlist",
    summary="the EAGLE-3 start-up allow-list admits deepseek_v2, deepseek_v3, kimi_k2, kimi_k25",
    why=(
        "SpeculativeConfig refuses an EAGLE-3 target whose hf_text_config.model_type contains none of "
        "the allow-list's entries: 'ValueError: Eagle3 is only supported for [...] models'. DeepSeek-V3 "
        "text configs report deepseek_v3 and Kimi-K2 reports kimi_k2."
    ),
    reference=f"vllm-project/vllm #31254 (Kimi-K2 blocked by the allow-list); entries native from v{NATIVE_FROM}",
    vllm=A1_RELEASES,
    upstream_from=NATIVE_FROM,
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"),
    target=ModuleTarget(modules=ALLOW_LIST_MODULES),
    codemod=CodemodRef.of(
        "allowlist",
        names=ALLOW_LIST_NAMES,
        entries=("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"),
    ),
)
