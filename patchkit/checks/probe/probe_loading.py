"""Checks 5 and 6 of the runtime probe: the wrappers' installed ``forward`` and vLLM's own draft loading
on stand-ins (see this folder's ``__init__.py``): V1's ``EagleProposer.load_model`` or V2's
``load_eagle_model`` (``v1/worker/gpu/spec_decode/eagle/utils.py``), whichever the spec's ``loader``
names (patchkit's runner declarations, :mod:`patchkit.vllm.runner.generations`).
"""

from __future__ import annotations

import inspect
import re
import sys
import traceback
import types

from probe_standins import NUM_LAYERS, SETTER, _Anything, load, stand_in_target


PROPOSER = "vllm.v1.spec_decode.eagle:EagleProposer"
"""vLLM's EAGLE proposer (V1, 0.10.2 - 0.33.0; from 0.2x its ``load_model`` is inherited from
``SpecDecodeBaseProposer`` in ``v1/spec_decode/llm_base_proposer.py``): the loader when the spec names none."""
V1_LOADER = {"runner": "V1", "module": "vllm.v1.spec_decode.eagle", "cls": "EagleProposer", "name": "load_model"}
BUILT = re.compile(r"self\.(\w+)\s*(?::[^=\n]*)?=\s*(VocabParallelEmbedding|ParallelLMHead)\(")
"""An ``__init__`` line building a vocabulary embedding or head (vLLM's layer classes, 0.10.2 - 0.33.0)."""
PARTS = re.compile(r"self\.(embed_tokens|embedding|lm_head)\s*(?::[^=\n]*)?=(?!=)")
"""Any other assignment of the attributes the proposer shares (``lm_head = self.model.embed_tokens``, ...)."""
VOCAB, WIDTH = 11, 4


def vllm_site(frames):
    """``vllm/...py:line`` of the innermost traceback frame inside the vllm package (else the innermost)."""
    for frame in reversed(frames):
        if "/vllm/" in frame.filename.replace("\\", "/"):
            return short(frame.filename, frame.lineno)
    return short(frames[-1].filename, frames[-1].lineno) if frames else "?"


def short(filename, lineno):
    """``vllm/...py:line`` for a file inside the vllm package (else the path as given)."""
    norm = filename.replace("\\", "/")
    return ("vllm/" + norm.rsplit("/vllm/", 1)[1] if "/vllm/" in norm else norm) + f":{lineno}"


def one_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def give_parts(holders):
    """Give each holder a tiny real module wherever its class (any vLLM class in its MRO: ``__init__``
    may be inherited or wrapped by a decorator) builds a vocabulary embedding or head, or assigns
    ``embed_tokens``/``embedding``/``lm_head`` (properties, such as ``embed_tokens`` returning
    ``word_embeddings`` in ``bailing_moe_v3.py``, are left to resolve to what they return).
    Returns ``{"embed": [(holder index, module), ...], "head": [...]}``."""

    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    placed = {"embed": [], "head": []}
    for i, holder in enumerate(holders):
        found = {}
        for klass in type(holder).__mro__:
            if not klass.__module__.startswith("vllm.") or "__init__" not in vars(klass):
                continue
            try:
                source = inspect.getsource(klass)
            except (OSError, TypeError):
                continue
            for m in BUILT.finditer(source):
                found.setdefault(m.group(1), "head" if m.group(2) == "ParallelLMHead" else "embed")
            for m in PARTS.finditer(source):
                found.setdefault(m.group(1), "head" if m.group(1) == "lm_head" else "embed")
        for name, kind in sorted(found.items()):
            if isinstance(getattr(type(holder), name, None), property):
                continue
            part = torch.nn.Linear(WIDTH, VOCAB, bias=False) if kind == "head" else torch.nn.Embedding(VOCAB, WIDTH)
            setattr(holder, name, part)
            placed[kind].append((i, part))
    return placed


class _TokenIds:
    """A target ``config``: any token-id field the proposer copies (``image_token_index``, ...) is 7."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return 7


def check_load_model(classes, chains, results, loader=None):
    """Run vLLM's own draft loader on CPU for each class, with stand-ins.

    ``loader`` (the spec's, from patchkit's runner declarations): ``runner``, ``module``, ``cls`` and
    ``name``; V1 (default): ``EagleProposer.load_model(target)``; V2 (``cls`` empty):
    ``load_eagle_model(target, vllm_config)``.

    The target is a stand-in of the class (no attribute fallback: a missing attribute must fail as
    it would in vLLM) whose holders get a tiny embedding / head where their ``__init__`` builds one.
    The draft stand-in has neither of its own (``has_own_embed_tokens``/``has_own_lm_head`` False,
    the flags the loader's sharing code reads), so the release must hand it the target's objects:
    the backbone's embedding, and the target's head when it has one. Inside this child only, the
    loader's module gets ``get_model`` (and the V1 proposer ``_get_model``) returning the draft,
    ``get_layers_from_vllm_config`` returning no layers, a single-stage ``get_pp_group``, and (V2) the
    draft's load config left as the engine's (``get_draft_load_config`` / ``get_pp_safe_draft_load_config``).
    A crash is a failed check: the exception's first line and the vLLM ``file:line`` it came from.
    """

    loader = loader or V1_LOADER
    if loader["cls"]:
        proposer_cls = load(f"{loader['module']}:{loader['cls']}")
        function = getattr(proposer_cls, loader["name"])
    else:
        proposer_cls, function = None, load(f"{loader['module']}:{loader['name']}")
    module = sys.modules[function.__module__]
    where = short(module.__file__, function.__code__.co_firstlineno)
    name = f"{loader['cls']}.{loader['name']}" if loader["cls"] else loader["name"]

    Draft = _draft_class()
    for arch, cls in classes.items():
        # V1's label is the one earlier reports carry; V2's names its runner (the run's header names it too)
        runner = "" if loader["runner"] == "V1" else f" ({loader['runner']} runner)"
        label = (
            f"{arch}: vLLM's {name}{runner} loads a draft and shares embeddings and head "
            "(consistency check on stand-ins)"
        )
        draft = Draft()
        own_embed, own_head = draft.model.embed_tokens, draft.lm_head
        single_stage = types.SimpleNamespace(world_size=1, is_first_rank=True, is_last_rank=True, rank_in_group=0)
        patches = {
            "get_model": lambda *a, **k: draft,
            "get_layers_from_vllm_config": lambda *a, **k: {},
            "get_pp_group": lambda: single_stage,
        }
        run = _loader_call(proposer_cls, function, draft, patches)
        present = {n for n in patches if n in module.__dict__}
        saved = {n: module.__dict__[n] for n in present}
        try:
            target, holders = stand_in_target(cls, chains.get(arch, []))
            target.config = _TokenIds()
            placed = give_parts(holders)
            module.__dict__.update({n: patches[n] for n in present})
            try:
                run(target)
            finally:
                module.__dict__.update(saved)
        except Exception as exc:  # noqa: BLE001 - what vLLM raised is the finding
            frames = traceback.extract_tb(exc.__traceback__)
            results.append(
                {
                    "label": label,
                    "ok": False,
                    "detail": f"{loader['name']} raised {one_line(exc)} at {vllm_site(frames)}",
                }
            )
            continue
        problems, shared = _sharing(draft, own_embed, own_head, placed, holders)
        heads = placed["head"]
        detail = (
            f"{where}: {loader['name']} ran through; the draft (no embeddings or head of its own) now uses the "
            "target's "
            + " and ".join(shared)
            + ("" if heads else " (the target has no lm_head: the draft keeps its own)")
        )
        results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or detail})


def _draft_class():
    """The draft stand-in: a tiny embedding and head of its own, flagged as not its own
    (``has_own_embed_tokens``/``has_own_lm_head`` False), so the release must share the target's."""
    import torch  # lazy: torch exists only in the target environment

    class Draft(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Module()
            self.model.embed_tokens = torch.nn.Embedding(VOCAB, WIDTH)
            self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
            self.config = types.SimpleNamespace()
            self.has_own_embed_tokens = False
            self.has_own_lm_head = False

    return Draft


def _loader_call(proposer_cls, function, draft, patches: dict):
    """``run(target)``: the release's loader on ``target``, loading ``draft``: V1 the proposer's
    ``load_model``, V2 the loader function (whose load-config helpers are added to ``patches``)."""
    import torch  # lazy: torch exists only in the target environment

    if proposer_cls is not None:

        class Proposer(proposer_cls):
            def __getattr__(self, name):  # proposer state __init__ would set: falsy stand-ins
                if name.startswith("__"):
                    raise AttributeError(name)
                return _Anything()

            def _get_model(self, *args, **kwargs):
                return draft

        proposer = object.__new__(Proposer)
        proposer.supports_mm_inputs = False
        proposer.parallel_drafting = False
        proposer.input_ids = torch.zeros(1, dtype=torch.int32)
        return lambda target: proposer.load_model(target)
    load_config = object()
    speculative = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(), draft_lm_head_quantization=None)
    vllm_config = types.SimpleNamespace(speculative_config=speculative, load_config=load_config)
    speculative.apply_draft_overrides = lambda config: config
    patches.update(
        {
            "get_draft_load_config": lambda config: config.load_config,
            "get_pp_safe_draft_load_config": lambda config: config,
        }
    )
    return lambda target: function(target, vllm_config)


def _sharing(draft, own_embed, own_head, placed: dict, holders: list) -> tuple[list[str], list[str]]:
    """``(problems, shared)``: whether the loaded draft uses the target backbone's embedding and the
    target's head (where it has one) instead of its own unloaded ones."""
    problems, shared = [], []
    backbone_index = len(holders) - 1
    embeds = [part for i, part in placed["embed"] if i == backbone_index]
    got_embed = getattr(draft.model, "embed_tokens", None)
    if any(got_embed is part for part in embeds):
        shared.append("embed_tokens")
    elif got_embed is own_embed:
        problems.append("the draft has no embed_tokens of its own but kept its unloaded one (not shared)")
    else:
        problems.append(f"the draft's embed_tokens is {type(got_embed).__name__}, not the target backbone's")
    heads = placed["head"]
    got_head = getattr(draft, "lm_head", None)
    if heads and any(got_head is part for _, part in heads):
        shared.append("lm_head")
    elif heads:
        problems.append(
            "the draft has no lm_head of its own but kept its unloaded one (the target's "
            f"head on {type(holders[heads[-1][0]]).__name__} was not shared)"
        )
    elif got_head is not own_head:
        problems.append(f"the target has no lm_head, yet the draft's became {type(got_head).__name__}")
    return problems, shared


def check_wrapper_forward(classes, chains, results):
    """Run the installed ``forward`` of each class that holds its backbone (causal LMs, multimodal
    wrappers) on a stand-in whose backbone returns a known ``(hidden, aux)`` tuple, aux ids set
    with the class's own setter. The class must return that tuple unchanged: the same hidden
    states, and every aux state, in layer order. An error before the backbone ran means the
    stand-ins cannot drive this forward (reported as not run, never as passed); after it, a failure.
    """
    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    for arch, cls in classes.items():
        chain = chains.get(arch, [])
        if not chain:
            continue  # the registered class is the backbone: its forward is check 4
        label = (
            f"{arch}.forward passes the backbone's (hidden_states, aux_hidden_states) through unchanged "
            "(consistency check on stand-ins)"
        )
        ids = (2, NUM_LAYERS // 2, NUM_LAYERS - 3)
        hidden = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        aux = {k: torch.full((3, 4), float(k)) for k in ids}
        calls = []
        try:
            out = _wrapper_forward(torch, cls, chain, ids, hidden, aux, calls)
        except Exception as exc:  # noqa: BLE001
            frames = traceback.extract_tb(exc.__traceback__)
            if calls:
                results.append(
                    {
                        "label": label,
                        "ok": False,
                        "detail": f"after the backbone returned its tuple, "
                        f"forward raised {one_line(exc)} at {vllm_site(frames)}",
                    }
                )
            else:
                results.append(
                    {
                        "label": label,
                        "ok": None,
                        "detail": f"not run: the stand-ins cannot drive this forward "
                        f"({one_line(exc)} at {vllm_site(frames)})",
                    }
                )
            continue
        problems = _passthrough_problems(out, calls, ids, hidden, [aux[k] for k in sorted(ids)])
        path = " -> ".join([cls.__name__] + [q.split(":")[1] for _, q in chain])
        results.append(
            {
                "label": label,
                "ok": not problems,
                "detail": "; ".join(problems)
                or f"{cls.__name__}.forward "
                f"({short(cls.forward.__code__.co_filename, cls.forward.__code__.co_firstlineno)}, "
                f"{path}) "
                f"returned the backbone's hidden states and aux states for ids {ids}, in layer order",
            }
        )


def _wrapper_forward(torch, cls, chain, ids, hidden, aux, calls):
    """Build ``cls`` on stand-ins (:func:`probe_standins.stand_in_target`), its backbone's ``forward`` replaced by
    one returning ``(hidden, [aux[k] for the requested ids])``, aux ids ``ids`` set, and run ``cls.forward``.

    Args:
        torch: the target environment's torch module.
        cls, chain: the class and the chain of holders down to its backbone.
        ids, hidden, aux: the aux ids requested, the backbone's hidden states, each id's aux state.
        calls: appended the backbone's requested ids each time the stand-in backbone runs (empty: it never ran).
    Returns:
        What ``cls.forward`` returned.
    Raises:
        Exception: anything building the stand-ins or running ``forward`` raises.
    """
    obj, holders = stand_in_target(cls, chain, fallback=True)
    backbone = holders[-1]
    # call forward directly (a compile decorator's __call__ reads state __init__ would set)
    backbone.__class__ = type(
        type(backbone).__name__, (type(backbone),), {"__call__": lambda self, *a, **k: self.forward(*a, **k)}
    )

    def backbone_forward(*args, backbone=backbone, **kwargs):
        calls.append(tuple(backbone.aux_hidden_state_layers))
        requested = sorted(backbone.aux_hidden_state_layers)
        return (hidden, [aux[k] for k in requested]) if requested else hidden

    backbone.forward = backbone_forward
    try:
        getattr(obj, SETTER)(ids)
    except Exception:  # noqa: BLE001 - whether the setter works is check 2 (run without fallbacks)
        pass
    # this check is about forward alone: the ids are on the backbone, however the setter fared
    backbone.aux_hidden_state_layers = ids
    return _forward_on_one_stage(torch, obj, holders, hidden)


def _forward_on_one_stage(torch, obj, holders, hidden):
    """Run ``obj.forward`` with ``get_pp_group`` of each holder's module (the backbone's excluded) answering
    one pipeline stage, first and last; each module's own ``get_pp_group`` (or its absence) is put back after.

    Returns:
        What ``obj.forward`` returned. Raises: anything it raises.
    """
    modules = {sys.modules[type(h).forward.__module__] for h in holders[:-1]}
    group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1)
    saved = {m: m.__dict__.get("get_pp_group") for m in modules}
    for m in modules:
        m.get_pp_group = lambda: group
    try:
        return obj.forward(
            input_ids=torch.zeros(3, dtype=torch.long),
            positions=torch.arange(3),
            intermediate_tensors=None,
            inputs_embeds=hidden.clone() * 0,
        )
    finally:
        for m, fn in saved.items():
            if fn is None:
                m.__dict__.pop("get_pp_group", None)
            else:
                m.get_pp_group = fn


def _passthrough_problems(out, calls: list, ids: tuple, hidden, expected: list) -> list[str]:
    """What is wrong with what a wrapper's ``forward`` returned, against the backbone's ``(hidden, aux)``."""
    import torch  # lazy: torch exists only in the target environment

    problems = []
    if not calls:
        problems.append("forward never called the backbone")
    elif calls[0] != ids:
        problems.append(f"the backbone saw aux ids {calls[0]}, not {ids}")
    if not (isinstance(out, tuple) and len(out) == 2):
        problems.append(
            f"forward returned {type(out).__name__}, not the (hidden_states, aux_hidden_states) tuple: "
            "the aux states were dropped"
        )
    else:
        got_hidden, got_aux = out
        if not (got_hidden is hidden or (isinstance(got_hidden, torch.Tensor) and torch.equal(got_hidden, hidden))):
            problems.append("the hidden_states came back changed")
        got_aux = list(got_aux) if isinstance(got_aux, (list, tuple)) else None
        if (
            got_aux is None
            or len(got_aux) != len(expected)
            or not all(isinstance(g, torch.Tensor) and (g is e or torch.equal(g, e)) for g, e in zip(got_aux, expected))
        ):
            problems.append(f"the aux states came back changed or reordered (expected layers {sorted(ids)} in order)")
    return problems
