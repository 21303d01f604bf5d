"""``patchkit doctor --target sglang``: a target and an EAGLE-3 draft read the way the installed SGLang reads them.

Inputs: the SGLang install (:func:`patchkit.sglang.install.locate`), the target's and the draft's ``config.json``.
Output: a frozen :class:`SglangDoctor`: the target's state in SGLang's registry (as ``scan --target sglang`` says
it), the ids SGLang's runner takes from the draft and the layers the target's setter captures for them, the
draft's vocabulary and input width against the target's, and one line on how vLLM would read the same draft.
Every SGLang fact is read from the install's files (:mod:`patchkit.sglang.drafts`) with its ``file:line``; where a
file is not in the shape read, the check says "not checked" and why. Nothing is written.

This module stands above both wings (rank 4): the vLLM side of the comparison is patchkit's own reading of vLLM's
draft fields (``docs/ids.md``, :mod:`patchkit.vllm.checkpoints.drafts`), not a vLLM install: the top-level
``eagle_aux_hidden_state_layer_ids`` is read verbatim as vLLM ids (vLLM 0.14.1 and later); ``eagle_config``'s ids
are ignored by every reader but the V1 model runner of 0.22.0 - 0.33.0, which takes them verbatim (one layer early
against SGLang's ``+ 1``); with no ids vLLM captures ``[2, n // 2, n - 3]``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import ConfigError, UsageError
from patchkit.sglang import contract as c
from patchkit.sglang import drafts as d
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.sglang.registry import entries, not_generative
from patchkit.sglang.scan import NOT_YET
from patchkit.sglang.states import State, classify
from patchkit.vllm.checkpoints.config import read_config
from patchkit.vllm.checkpoints.drafts import EAGLE_CONFIG, IDS_FIELD
from patchkit.vllm.stream.aux_defaults import vllm_default_ids

NOT_CHECKED = "not checked"
SAME_AS_DEFAULT = "same layers as vLLM's default"


@dataclass(frozen=True)
class Item:
    """One line of the checklist.

    Attributes:
        label: what is checked.
        ok: True (✓), False (✗), or None: not checked (``detail`` says why) or, with ``info``, a fact that
            cannot fail.
        detail: the evidence, one line.
        location: ``file:line`` (below site-packages) of the SGLang fact, or None.
        info: a fact shown, not a check (the vLLM comparison).
    """

    label: str
    ok: bool | None
    detail: str
    location: str | None = None
    info: bool = False

    @property
    def status(self) -> str:
        if self.info:
            return "info"
        return NOT_CHECKED if self.ok is None else ("ok" if self.ok else "failed")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "status": self.status, "detail": self.detail, "location": self.location}


@dataclass(frozen=True)
class SglangDoctor:
    """What ``doctor --target sglang`` found.

    Attributes:
        install: the SGLang install read.
        target_config, draft_config: the ``config.json`` files read.
        architecture: the target's ``architectures[0]``.
        state: its state in SGLang's registry (:class:`patchkit.sglang.states.State`).
        ids_read: the ids SGLang's runner takes from the draft (None: the target's default).
        captured: the layers the target's setter captures, or None when not checked.
        vllm_ids: the layers vLLM captures for the same draft where it reads the top-level field or its default.
        vllm_line: the one-line comparison with vLLM.
        items: the checklist.
    """

    install: SglangInstall
    target_config: Path
    draft_config: Path
    architecture: str
    state: State
    ids_read: tuple[int, ...] | None
    captured: tuple[int, ...] | None
    vllm_ids: tuple[int, ...]
    vllm_line: str
    items: tuple[Item, ...]

    @property
    def ready(self) -> bool:
        """Every check passed (a "not checked" is not a pass)."""
        return all(i.ok for i in self.items if not i.info)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {
            "command": "doctor",
            "target": c.DISTRIBUTION,
            "install": {"site_packages": str(self.install.site_packages), "version": str(self.install.version)},
            "model": str(self.target_config),
            "draft": str(self.draft_config),
            "architecture": self.architecture,
            "state": self.state.value,
            "ids_read": None if self.ids_read is None else list(self.ids_read),
            "captured": None if self.captured is None else list(self.captured),
            "vllm": {"captured": list(self.vllm_ids), "line": self.vllm_line},
            "ready": self.ready,
            "verdict": "ready" if self.ready else "not ready",
            "checks": [i.to_dict() for i in self.items],
        }


def _text_field(config: dict, name: str) -> Any:
    """A field of the config, else of its ``text_config`` (a multimodal target)."""
    if name in config:
        return config[name]
    text = config.get("text_config")
    return text.get(name) if isinstance(text, dict) else None


def _positive(config: dict, name: str, path: Path) -> int:
    value = _text_field(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}: {name} is {value!r}, not a positive integer", f"fix {name} in {path}")
    return value


def _ids(value: Any) -> list[int] | None:
    ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return list(value) if ok else None


def _entry(package: Package, architecture: str):
    """The registry entry of ``architecture``; a name the registry does not hold is a usage error (exit 2)."""
    found = [e for e in entries(package, architecture) if e.architecture == architecture]
    if found:
        return found[0]
    every = entries(package)
    exact = [e for e in every if e.architecture == architecture]
    if exact:  # registered through another module's alias: only the full walk finds it
        return exact[0]
    close = difflib.get_close_matches(architecture, [e.architecture for e in every], n=3)
    raise UsageError(
        f"--model names {architecture}, which this SGLang's registry does not hold",
        ("closest registered: " + ", ".join(close)) if close else "patchkit scan --target sglang lists the registry",
    )


def _target_item(state: State, entry, package: Package) -> Item:
    setter = None if entry.cls is None else package.definer(entry.cls, c.CAPTURE_SETTER)
    where = None
    if setter is not None:
        line = next(n.lineno for n in setter.node.body if getattr(n, "name", None) == c.CAPTURE_SETTER)
        where = f"{d.rel_file(package, setter.module)}:{line}"
    label = f"target {entry.architecture}"
    if state is State.NATIVE:
        return Item(label, True, f"native: {c.CAPTURE_SETTER} from {setter.name}", where)
    if state is State.MISSING:
        detail = (
            f"missing: no {c.CAPTURE_SETTER} in its lineage, so SGLang's runner cannot set its captures "
            f"(ValueError or AttributeError at start-up); {NOT_YET}"
        )
    elif state is State.DRAFT:
        detail = "a draft model (it reads the target's hidden states), not a target"
    elif state is State.NOT_GENERATIVE:
        detail = "an embedding, reward or classification model: SGLang serves it without speculative decoding"
    else:
        detail = f"{c.ENTRY} names it, but not as a class patchkit can read"
    return Item(label, False, detail, None)


def _runner_item(package: Package, draft: dict) -> tuple[Item, bool, list[int] | None]:
    """The runner's reading (fact 1): its item, ``use_aux_hidden_state`` and the ids it passes."""
    use, ids = d.read_ids(draft)
    label = "ids SGLang's runner reads"
    try:
        read = d.runner_read(package)
    except d.Unread as exc:
        return Item(label, None, f"{NOT_CHECKED}: {exc}"), use, ids
    if read.top_level:
        return Item(label, None, f"{NOT_CHECKED}: {read.read.function} also reads a top-level {d.IDS_KEY}"), use, ids
    if not use:
        return Item(label, False, f"{EAGLE_CONFIG}.{d.USE_AUX_KEY} is false: no aux state reaches the draft"), use, ids
    where = str(read.read)
    by = f"{read.read.function}; passed on at {read.call}" if read.call else read.read.function
    if ids is None:
        text = f"no {EAGLE_CONFIG}.{d.IDS_KEY}: None, the target's default (a top-level one is not read; {by})"
        return Item(label, True, text, where), use, None
    return Item(label, True, f"{EAGLE_CONFIG}.{d.IDS_KEY} = {ids} ({by})", where), use, ids


def _capture_item(package: Package, entry, state: State, ids: list[int] | None, n: int) -> tuple[Item, d.Capture]:
    """The layers the setter captures (fact 2); a per-model exception named."""
    label = "layers SGLang captures"
    if state is not State.NATIVE or entry.cls is None:
        return Item(label, None, f"{NOT_CHECKED}: the target has no {c.CAPTURE_SETTER}"), d.Capture(None, None, "")
    cap = d.captured(package, entry.cls, ids, n)
    if cap.ids is None:
        return Item(label, None, f"{NOT_CHECKED}: {cap.reason}"), cap
    rule = "its default" if ids is None else "the ids + 1"
    if ids is not None and list(cap.ids) != [i + 1 for i in ids]:
        rule = f"the ids as given, not + 1: {cap.where.function}'s own rule"
    bad = [i for i in cap.ids if not 0 <= i <= n]
    if bad:
        return Item(label, False, f"{list(cap.ids)}: {bad} outside the target's {n} layers", str(cap.where)), cap
    if n in cap.ids:  # the last layer's output: whether the model's loop captures it is not read here
        why = f"{list(cap.ids)} holds {n}, the last layer's output; whether {entry.architecture}'s loop captures it"
        return Item(label, None, f"{NOT_CHECKED}: {why} is not read", str(cap.where)), cap
    return Item(label, True, f"{list(cap.ids)} of {n} layers ({rule})", str(cap.where)), cap


def _draft_items(package: Package, target: dict, draft: dict, tpath: Path, captured) -> list[Item]:
    """The vocabulary and the input width (fact 3); "not checked" where the target's config lacks either size."""
    archs = draft.get("architectures")
    named = archs[0] if isinstance(archs, list) and archs else None
    if named != d.DRAFT_CLASS:
        why = f"{NOT_CHECKED}: the draft's class is {named}; doctor reads {d.DRAFT_CLASS}'s sizes only"
        return [Item("draft vocabulary", None, why), Item("draft input width", None, why)]
    try:
        fc = d.fc_read(package)
    except d.Unread as exc:
        return [Item("draft vocabulary", None, f"{NOT_CHECKED}: {exc}"), Item("draft input width", None, str(exc))]
    t_vocab, t_hidden = _text_field(target, "vocab_size"), _text_field(target, "hidden_size")
    if not (isinstance(t_vocab, int) and isinstance(t_hidden, int)):
        why = f"{NOT_CHECKED}: {tpath} gives no integer vocab_size and hidden_size"
        return [Item("draft vocabulary", None, why), Item("draft input width", None, why)]
    vocab, head = draft.get("vocab_size"), draft.get("draft_vocab_size")
    head_rows = vocab if head is None else head
    vocab_ok = vocab == t_vocab and isinstance(head_rows, int) and 0 < head_rows <= t_vocab
    vocab_item = Item(
        "draft vocabulary",
        vocab_ok,
        f"vocab_size {vocab} (target {t_vocab}), lm_head rows {head_rows} (draft_vocab_size"
        f"{'' if head is not None else ' unset: vocab_size'})",
        str(fc.lm_head) if fc.lm_head else str(fc.fc),
    )
    per = draft.get(d.WIDTH_FIELD) or draft.get("hidden_size")
    count = d.fc_count(draft)
    if not isinstance(per, int) or captured is None:
        why = "the layers captured are not known" if captured is None else "the draft has no hidden_size"
        return [vocab_item, Item("draft input width", None, f"{NOT_CHECKED}: {why}", str(fc.fc))]
    want = t_hidden * len(captured)
    return [
        vocab_item,
        Item(
            "draft input width",
            per * count == want,
            f"fc takes {per} x {count} = {per * count}; the target gives {t_hidden} x {len(captured)} = {want}",
            str(fc.fc),
        ),
    ]


def vllm_comparison(draft: dict, n: int, sglang: tuple[int, ...] | None) -> tuple[tuple[int, ...], str]:
    """How vLLM reads the same draft's ids (the module docstring), as ``(layers, one line)``; the line says whether
    SGLang's layers differ. Inputs: the draft's config, the target's layer count, SGLang's layers (None: not known).
    """
    top, nested = _ids(draft.get(IDS_FIELD)), d.read_ids(draft)[1]
    default = tuple(vllm_default_ids(n))
    theirs = "not known" if sglang is None else str(list(sglang))

    def verb(vllm: tuple[int, ...], same: str = "same layers") -> str:
        return "not compared" if sglang is None else (same if sglang == vllm else "differs")

    if top is not None:
        return tuple(top), (
            f"{verb(tuple(top))}: vLLM reads the top-level {IDS_FIELD} verbatim and captures {top}; "
            f"SGLang does not read it (only {EAGLE_CONFIG}'s) and captures {theirs}"
        )
    if nested is not None:
        early = list(nested)
        return default, (
            f"{verb(default, SAME_AS_DEFAULT)}: SGLang reads {EAGLE_CONFIG}.{IDS_FIELD} and captures {theirs}; "
            f"vLLM ignores it (its default "
            f"{list(default)}) except in the V1 model runner of some releases, which takes it verbatim: {early}"
            f"{'' if sglang is None else ', as SGLang' if tuple(early) == sglang else ', not as SGLang'} (docs/ids.md)"
        )
    return default, f"{verb(default)}: no ids in the draft; vLLM captures its default {list(default)}, SGLang {theirs}"


def doctor(install: SglangInstall, model: Path, draft: Path) -> SglangDoctor:
    """Read ``model`` and ``draft`` (checkpoint folders or their ``config.json``) against ``install``.

    Raises:
        ConfigError: a ``config.json`` missing, unreadable or invalid; no ``architectures``; a target
            ``num_hidden_layers`` that is not a positive integer (exit 4).
        UsageError: the target's architecture is not in this SGLang's registry (exit 2, the closest names).
    """
    target_cfg, draft_cfg = read_config(model, "--model"), read_config(draft, "--draft")
    target = target_cfg.data
    archs = target.get("architectures")
    if not (isinstance(archs, list) and archs and isinstance(archs[0], str)):
        raise ConfigError(f"{target_cfg.path} has no architectures list", "the target's config.json names its class")
    n = _positive(target, "num_hidden_layers", target_cfg.path)
    package = Package(install.site_packages, c.PACKAGE)
    entry = _entry(package, archs[0])
    state = classify(package, entry, not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)).state
    runner, use, ids = _runner_item(package, draft_cfg.data)
    capture_item, cap = _capture_item(package, entry, state, ids, n)
    captured = cap.ids if use else None
    vllm_ids, line = vllm_comparison(draft_cfg.data, n, captured)
    items = (
        _target_item(state, entry, package),
        runner,
        capture_item,
        *_draft_items(package, target, draft_cfg.data, target_cfg.path, captured),
        Item("vLLM reads this draft", None, line, info=True),
    )
    return SglangDoctor(
        install,
        target_cfg.path,
        draft_cfg.path,
        archs[0],
        state,
        None if ids is None else tuple(ids),
        captured,
        vllm_ids,
        line,
        items,
    )


__all__ = ["Item", "SglangDoctor", "doctor", "vllm_comparison"]
