"""The draft's vocabulary against the target's: which tokenizer it was trained for, and its draft-vocabulary map."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from patchkit.checks.drafts.context import DraftContext, DraftFacts
from patchkit.results import Check
from patchkit.vllm.checkpoints.config import CheckpointConfig, as_int
from patchkit.vllm.checkpoints.vocabulary import DRAFT_TO_TARGET, read_maps, read_tokenizer
from patchkit.vllm.checkpoints.weights import weight_names


PADDING_ROWS = 1024
"""Largest gap between the draft's and the target's ``vocab_size`` that, with nothing else to go on,
is left undecided (a padded embedding or added tokens) instead of failing as another tokenizer."""


def _judge_vocabulary(
    label: str, vocab: int, target_vocab: int, draft_dir: Path, target_dir: Path, ctx: DraftContext
) -> Check:
    """Which tokenizer the draft was trained for, from the sizes, ``d2t``/``t2d`` and the tokenizers: a
    :class:`Check` named ``label`` with the verdict.

    Evidence (:mod:`patchkit.vllm.checkpoints.vocabulary`): the two folders' tokenizers (same vocabulary digest or
    special tokens, or not); the draft's ``t2d`` length (the target vocabulary it was trained against)
    and the highest target id its ``d2t`` proposes. Decision: any evidence of another tokenizer
    fails; an embedding smaller than the ids the target's tokenizer produces fails (those ids have no
    row); a larger one with evidence of the same tokenizer is padding: a note, not a failure (vLLM's
    draft embeds target ids, which never reach the extra rows); sizes that differ with no evidence
    either way are left undecided within :data:`PADDING_ROWS`, and fail beyond it.

    Fact (vLLM 0.10.2 - 0.33.0 ``model_executor/models/llama_eagle3.py``): the draft embeds target
    token ids with ``vocab_size`` rows; its head's ids go through ``d2t`` into a vector of
    ``vocab_size`` logits.
    """
    same: list[str] = []
    other: list[str] = []
    produced = _tokenizer_evidence(same, other, target_vocab, draft_dir, target_dir)
    beyond = _map_evidence(same, other, vocab, target_vocab, produced, draft_dir)
    return _decide_vocabulary(label, vocab, target_vocab, produced, same, other, beyond, ctx)


def _tokenizer_evidence(same: list[str], other: list[str], target_vocab: int, draft_dir: Path, target_dir: Path) -> int:
    """The two folders' tokenizers: evidence of the same tokenizer or another, appended to ``same`` / ``other``;
    returns how many ids the target's tokenizer produces (its size, else the target's ``vocab_size``)."""
    draft_tok, target_tok = read_tokenizer(draft_dir), read_tokenizer(target_dir)
    if draft_tok is not None and target_tok is not None:
        if draft_tok.digest is not None and target_tok.digest is not None:
            if draft_tok.digest == target_tok.digest:
                same.append(
                    f"the draft's and the target's tokenizer.json hold the same vocabulary ({target_tok.size} ids)"
                )
            else:
                other.append(
                    f"the draft's tokenizer.json ({draft_tok.size} ids) is not the target's ({target_tok.size} ids)"
                )
        elif draft_tok.specials and draft_tok.specials == target_tok.specials:
            same.append(f"the same {len(target_tok.specials)} special tokens with the same ids in both tokenizers")
        elif draft_tok.specials and target_tok.specials:
            differ = sorted(set(draft_tok.specials.items()) ^ set(target_tok.specials.items()))[:3]
            other.append("the tokenizers' special tokens differ (" + ", ".join(f"{t!r}: {i}" for t, i in differ) + ")")
    return target_tok.size if target_tok is not None and target_tok.size is not None else target_vocab


def _map_evidence(
    same: list[str], other: list[str], vocab: int, target_vocab: int, produced: int, draft_dir: Path
) -> int | None:
    """The draft's ``t2d`` length and ``d2t`` range: evidence appended to ``same`` / ``other``; returns the
    highest target id ``d2t`` proposes when it is beyond the target's vocabulary, else None."""
    maps = read_maps(draft_dir)
    beyond = None
    if maps is not None and maps.t2d_size is not None:
        # SpecForge sizes t2d from the draft's own vocab_size: that length says nothing either way
        if maps.t2d_size in (target_vocab, produced):
            same.append(
                f"the draft's t2d has {maps.t2d_size} entries: it was trained against a vocabulary of the target's size"
            )
        elif maps.t2d_size != vocab:
            other.append(
                f"the draft's t2d has {maps.t2d_size} entries: it was trained against a {maps.t2d_size}-id "
                f"vocabulary, the target has {target_vocab}"
            )
    if maps is not None and maps.highest_target_id is not None:
        if maps.highest_target_id < target_vocab:
            same.append(
                f"its d2t maps every draft id to a target id below {target_vocab} "
                f"(the highest is {maps.highest_target_id})"
            )
        else:
            beyond = maps.highest_target_id
    return beyond


def _decide_vocabulary(
    label: str,
    vocab: int,
    target_vocab: int,
    produced: int,
    same: list[str],
    other: list[str],
    beyond: int | None,
    ctx: DraftContext,
) -> Check:
    """The verdict on the evidence (see :func:`_judge_vocabulary`), with its action or warning: a
    :class:`Check` named ``label``."""
    ok: bool | None = True
    children: list[Check] = []
    if other:
        ok = False
        detail = (
            f"the draft (vocab_size {vocab}) was trained for another tokenizer than the target's (vocab_size "
            f"{target_vocab}): "
            + "; ".join(other)
            + ": it would predict another tokenizer's ids (acceptance near zero)"
        )
        ctx.actions.append("use a draft trained for this target's tokenizer: " + "; ".join(other))
    elif beyond is not None:
        ok = False
        detail = (
            f"the draft's d2t maps a draft id to target id {beyond}, beyond the target's vocab_size {target_vocab}: "
            "the draft proposes a token the target cannot score"
        )
        ctx.actions.append(f"use a draft whose d2t maps into this target's {target_vocab} ids")
    elif vocab == target_vocab:
        detail = f"vocab_size {vocab}, the same as the target's" + (f" ({'; '.join(same)})" if same else "")
    elif vocab < produced:
        ok = False
        detail = (
            f"the draft's vocab_size is {vocab}, the target's {target_vocab}: the target's tokenizer produces ids "
            f"up to {produced - 1}, and ids {vocab}..{produced - 1} have no row in the draft's embedding (trained "
            "for another tokenizer?)"
        )
        ctx.actions.append(
            f"use a draft whose vocabulary covers this target's ({produced} ids); this one has {vocab} rows"
        )
    elif same:
        ok = True
        detail = f"vocab_size {vocab}, the target's {target_vocab}: the same tokenizer (" + "; ".join(same) + ")"
        children.append(
            Check(
                f"padded embedding (+{vocab - target_vocab} rows)",
                None,
                f"the draft's embedding has {vocab - target_vocab} more rows than the target's vocabulary "
                "(len(tokenizer) counts added tokens, or the export padded it); target ids never reach them",
            )
        )
    elif vocab - target_vocab <= PADDING_ROWS:
        ok = None
        detail = (
            f"the draft's vocab_size is {vocab}, the target's {target_vocab} (+{vocab - target_vocab}): "
            "likely a padded embedding or added tokens, but nothing in the folders says which tokenizer the draft "
            "was trained for (no tokenizer files in both, no d2t/t2d in its weights): not decided"
        )
        ctx.warnings.append(
            f"the draft's vocab_size {vocab} is the target's {target_vocab} + {vocab - target_vocab}: put the draft's "
            f"tokenizer.json next to its config.json (and the target's next to its own), or its weights with "
            f"d2t/t2d, and run doctor again to tell a padded embedding from another tokenizer"
        )
    else:
        ok = False
        detail = (
            f"the draft's vocab_size is {vocab}, the target's {target_vocab}: {vocab - target_vocab} rows apart, "
            f"more than padding ({PADDING_ROWS}), and no tokenizer files or d2t/t2d in the folders show the same "
            "tokenizer: likely trained for another tokenizer (acceptance near zero)"
        )
        ctx.actions.append(
            f"use a draft trained for this target's tokenizer (vocab_size {target_vocab}); this one has {vocab}"
        )
    return Check(label, ok, detail, children=children)


def vocab_check(facts: DraftFacts, cfg: CheckpointConfig, layer: dict[str, Any], ctx: DraftContext) -> Check:
    """The draft's vocabulary against the target's, and its draft-vocabulary map.

    Fact (vLLM 0.10.2 - 0.33.0 ``model_executor/models/llama_eagle3.py``): the draft embeds target
    token ids with ``vocab_size`` rows; its head predicts ``draft_vocab_size`` ids (default
    ``vocab_size``) and maps them through ``d2t`` when the weights hold it, else id ``i`` stays ``i``.
    """
    data = cfg.data
    vocab = (
        as_int(layer.get("vocab_size"))
        if as_int(layer.get("vocab_size")) is not None
        else as_int(data.get("vocab_size"))
    )
    draft_vocab = as_int(data.get("draft_vocab_size"))
    if draft_vocab is None:
        draft_vocab = as_int(layer.get("draft_vocab_size"))
    facts.vocab_size, facts.draft_vocab_size = vocab, draft_vocab
    target_vocab = ctx.target.vocab_size
    label = "draft vocabulary"
    if vocab is None:
        node = Check(label, None, "the draft's config.json gives no vocab_size: not checked")
    elif target_vocab is None:
        node = Check(
            label, None, f"draft vocab_size {vocab}; the target's text config gives no vocab_size: not compared"
        )
    else:
        node = _judge_vocabulary(label, vocab, target_vocab, cfg.path.parent, Path(ctx.target.config).parent, ctx)
    children = list(node.children)
    if draft_vocab is not None and vocab is not None and draft_vocab != vocab:
        if draft_vocab > vocab:
            children.append(
                Check(
                    f"draft_vocab_size {draft_vocab}",
                    False,
                    f"larger than vocab_size {vocab}: the map to target ids cannot exist",
                )
            )
            ctx.actions.append("fix the draft's draft_vocab_size: it cannot exceed vocab_size")
        else:
            names = weight_names(cfg.path.parent)
            if names is None:
                children.append(
                    Check(
                        f"draft_vocab_size {draft_vocab}",
                        None,
                        f"the head predicts {draft_vocab} of {vocab} ids through the {DRAFT_TO_TARGET} map "
                        "in the weights; no weights patchkit can read next to config.json: not checked",
                    )
                )
            elif any(n.split(".")[-1] == DRAFT_TO_TARGET for n in names):
                children.append(
                    Check(
                        f"draft_vocab_size {draft_vocab}",
                        True,
                        f"the weights hold the {DRAFT_TO_TARGET} map to the {vocab} target ids",
                    )
                )
            else:
                children.append(
                    Check(
                        f"draft_vocab_size {draft_vocab}",
                        False,
                        f"the weights hold no {DRAFT_TO_TARGET} map: vLLM keeps draft id i as target id i "
                        "(wrong tokens, acceptance near zero)",
                    )
                )
                ctx.actions.append(
                    f"the draft's weights need its {DRAFT_TO_TARGET} tensor (draft_vocab_size {draft_vocab} "
                    f"< vocab_size {vocab}): download the complete draft checkpoint"
                )
    ok = False if any(c.ok is False for c in children) else node.ok
    return replace(node, ok=ok, children=children)


__all__ = ["PADDING_ROWS", "vocab_check"]
