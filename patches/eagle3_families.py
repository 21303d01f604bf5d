"""Model families with public EAGLE-3 drafts that vLLM lacks native support for (in some releases).

patchkit reads how to patch an architecture from the release's own files; an entry here adds only
what those files cannot tell: the ``model_type`` its checkpoints report, which the speculative
config's start-up allow-list (:data:`patchkit.vllm.release.contract.ALLOW_LIST_RELEASES`) must admit. Adding a family is
one entry. The model types are those of the families' published ``config.json`` files (``text_config`` for
multimodal checkpoints).
"""

from patchkit.plan.spec import Family

FAMILIES = (
    Family("glm4-moe", ("Glm4MoeForCausalLM",), ("glm4_moe",)),
    Family("gemma3", ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"), ("gemma3_text", "gemma3")),
    Family("bailing-moe", ("BailingMoeForCausalLM", "BailingMoeV2ForCausalLM"), ("bailing_moe",)),
    Family("step3p5", ("Step3p5ForCausalLM",), ("step3p5",)),
    Family("longcat-flash", ("LongcatFlashForCausalLM",), ("longcat_flash",)),
    Family("olmoe", ("OlmoeForCausalLM",), ("olmoe",)),
    Family("seed-oss", ("SeedOssForCausalLM",), ("seed_oss",)),
    Family("qwen3-next", ("Qwen3NextForCausalLM",), ("qwen3_next",)),
    Family(
        "qwen3.5",
        (
            "Qwen3_5ForCausalLM",
            "Qwen3_5MoeForCausalLM",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
        ),
        ("qwen3_5", "qwen3_5_moe"),
    ),
)
