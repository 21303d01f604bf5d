"""The EAGLE proposer maps Kimi-K2.5's image token (``media_placeholder_token_id``)."""

from patchkit.codemods import CodemodRef
from patchkit.vllm.release.contract import KIMI_K25_RELEASES, NATIVE_FROM
from patchkit.plan.spec import ModuleTarget, Patch

PATCH = Patch(
    id="eagle3-kimi-k25-proposer",
    summary="the EAGLE proposer reads media_placeholder_token_id for KimiK25ForConditionalGeneration",
    why=(
        "For a multimodal target not in its hard-coded list, the proposer reads "
        "target_model.config.image_token_index; Kimi-K2.5's config has media_placeholder_token_id "
        "instead, so loading the draft fails with an AttributeError."
    ),
    reference=(
        f"vllm-project/vllm, KimiK25ForConditionalGeneration branch native from v{NATIVE_FROM} "
        "(v1/spec_decode/eagle.py)"
    ),
    vllm=KIMI_K25_RELEASES,
    upstream_from=NATIVE_FROM,
    architectures=("KimiK25ForConditionalGeneration",),
    target=ModuleTarget(modules=("vllm.v1.spec_decode.eagle",)),
    codemod=CodemodRef.of(
        "proposer-branch",
        model="KimiK25ForConditionalGeneration",
        after="PixtralForConditionalGeneration",
        attribute="media_placeholder_token_id",
        patch_id="eagle3-kimi-k25-proposer",
    ),
    requires=("eagle3-kimi-k25-interface",),
)
