"""Runtime probe: asks the installed vLLM itself whether EAGLE-3 is in effect. Run by ``verify --runtime``.

This file is executed as a script by the *target* interpreter (the environment that serves the
model), in a fresh subprocess, never inside patchkit's own process. It imports only the standard
library and what that environment already has (vLLM, torch). It must not import patchkit.

Input: one JSON argument::

    {"architectures": ["DeepseekV2ForCausalLM", ...],
     "chains": {"KimiK25ForConditionalGeneration": [["language_model", "mod:Class"], ["model", "mod:Class"]], ...},
     "backbones": {"vllm.model_executor.models.deepseek_v2:DeepseekV2Model": {"residual": true}, ...},
     "getter": "get_eagle3_aux_hidden_state_layers",
     "model_types": ["deepseek_v3", "kimi_k2"],
     "pp_flag": "<patchkit.vllm.contract.PP_FLAG>"}

``pp_flag`` is the name of the A3 backbone attribute that says it carries aux states between
pipeline stages (:data:`patchkit.vllm.contract.PP_FLAG`; the probe cannot import patchkit).
``getter`` is the release's aux-layer getter (A1: ``get_eagle3_aux_hidden_state_layers``; 0.18.0
on: ``get_eagle3_default_aux_hidden_state_layers``); ``residual`` says whether the stream entering a
layer is ``hidden_states + residual`` (else ``hidden_states`` alone), as patchkit decided it from
the release's code (:func:`patchkit.vllm.stream.residual_stream`): the stand-in layers of check 4 follow
that decision, so check 4 is a consistency check, not independent proof (see :data:`STAND_IN`).

Output: each check also carries ``"basis": "stand-in"`` when it rests on stand-ins.

Output: a line ``PATCHKIT-PROBE-RESULT {"checks": [{"label", "ok", "detail"}, ...]}`` on stdout
(vLLM's own log lines may come before it).

Checks (facts from vLLM 0.10.2 - 0.33.0); 1 and 3 are vLLM's own answers, 2, 4, 5 and 6 are consistency
checks on stand-ins (:data:`STAND_IN`):

1. the registry loads each architecture's class and ``supports_eagle3`` (``interfaces.py``) accepts it;
2. ``set_aux_hidden_state_layers`` / ``get_eagle3_aux_hidden_state_layers`` are not the Protocol's
   stubs, and on a stand-in of the class (its real methods, attributes holding stand-ins of what
   ``__init__`` would build) the setter reaches the backbone and the getter returns
   ``(2, n // 2, n - 3)``;
3. ``SpeculativeConfig._verify_args`` (``config/speculative.py``), vLLM's own start-up
   validation, accepts an EAGLE-3 target whose ``hf_text_config.model_type`` is each model type;
4. the backbone's real (installed) ``forward`` on a tiny stand-in: cheap deterministic decoder
   layers on CPU tensors, pipeline-stage bounds that do not start at 0; each requested id must
   return the residual stream entering that layer (id n: the final output before the norm), in
   layer order, and with no ids the return value must be exactly the unpatched result;
5. each class that holds its backbone (causal LM, multimodal wrapper): its installed ``forward``,
   aux ids set, on a stand-in whose backbone returns a known ``(hidden, aux)`` tuple, must return
   that tuple unchanged (same hidden states, every aux state, in layer order);
6. vLLM's own draft loading, ``EagleProposer.load_model(target)`` (``v1/spec_decode/eagle.py``; from
   0.2x inherited from ``llm_base_proposer.py``), on CPU with a stand-in target and a stand-in
   draft that has no embeddings or head of its own: it must run through, and the draft must end
   up with the target backbone's embedding and the target's head (the very objects). A crash is
   a failed check naming the exception and the vLLM ``file:line`` it was raised at (Kimi-K2.5 on
   0.15.1: ``get_language_model()`` returns a bare backbone, ``AttributeError`` on ``.model``).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import traceback
import types

SENTINEL = "PATCHKIT-PROBE-RESULT"
STAND_IN = "consistency check on stand-ins"
"""Label suffix of every check that runs installed code on stand-ins (checks 2, 4, 5 and 6): their layers,
norms, backbones and drafts follow patchkit's own reading of vLLM's contracts (for check 4: the
stream entering a layer is ``hidden_states + residual`` or ``hidden_states`` alone, as
:mod:`patchkit.vllm.stream` decided from the same code the codemod read), so such a check confirms that
the written code is consistent with that reading (right places, order, pipeline stages, return
values); it cannot show the reading wrong. Only the real layer code (vLLM's engine, transformers'
``hidden_states``) can. Checks 1 and 3 are vLLM's own answers on its real classes."""
SETTER = "set_aux_hidden_state_layers"
GETTER = "get_eagle3_aux_hidden_state_layers"
NUM_LAYERS = 61  # DeepSeek-V3 / Kimi-K2: default ids (2, 30, 58)


def call_backbone(cls, obj, positions, tensors, embeds):
    """``cls.forward(obj, ...)`` with vLLM's backbone arguments, by the names this forward uses
    (``positions`` or ``position_ids``: 0.33.0 ``bailing_moe.py``)."""
    import inspect

    kwargs = {}
    for name in list(inspect.signature(cls.forward).parameters)[1:]:
        if name == "input_ids":
            kwargs[name] = None
        elif name.startswith("position"):
            kwargs[name] = positions
        elif name == "intermediate_tensors":
            kwargs[name] = tensors
        elif name == "inputs_embeds":
            kwargs[name] = embeds
    return cls.forward(obj, **kwargs)


def load(qualified: str):
    module, _, name = qualified.partition(":")
    return getattr(importlib.import_module(module), name)


def blank(cls):
    """An instance of ``cls`` with nn.Module state but without running its ``__init__``."""
    import torch

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def stand_in_backbone(cls, num_layers: int):
    import torch

    obj = blank(cls)
    obj.layers = torch.nn.ModuleList([torch.nn.Identity() for _ in range(num_layers)])
    obj.aux_hidden_state_layers = ()
    return obj


def stand_in_target(cls, chain, fallback=False):
    """A stand-in of ``cls``: its real methods, each link of ``chain`` holding a stand-in of its class.

    ``chain`` is ``[[attr, "module:Class"], ...]`` down to the backbone (the last link), which gets
    ``NUM_LAYERS`` identity layers. With ``fallback``, every holder answers attributes ``__init__``
    would have set with :class:`_Anything` (the classes keep their names). Returns ``(obj, holders)``,
    ``holders[0]`` being ``obj`` and ``holders[-1]`` the backbone (``obj`` itself with no chain).
    """
    def kind(c):
        if not fallback:
            return c
        return type(c.__name__, (c,), {"__getattr__": _fallback_getattr, "__module__": c.__module__,
                                       "__qualname__": c.__qualname__})

    obj = blank(kind(cls))
    holders = [obj]
    for i, (attr, qualified) in enumerate(chain):
        held_cls = kind(load(qualified))
        held = stand_in_backbone(held_cls, NUM_LAYERS) if i == len(chain) - 1 else blank(held_cls)
        setattr(holders[-1], attr, held)
        holders.append(held)
    return obj, holders


def _fallback_getattr(self, name):
    import torch

    try:
        return torch.nn.Module.__getattr__(self, name)
    except AttributeError:
        if name.startswith("__"):
            raise
        return _Anything()


def check_registry(archs, results):
    from vllm.model_executor.models import interfaces
    from vllm.model_executor.models.registry import ModelRegistry

    classes = {}
    for arch in archs:
        label = f"vLLM's supports_eagle3 accepts {arch}"
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # noqa: BLE001 - report whatever vLLM raised
            results.append({"label": label, "ok": False, "detail": f"the registry could not load it: {exc!r}"})
            continue
        if cls is None:
            results.append({"label": label, "ok": False, "detail": "the registry could not load it"})
            continue
        classes[arch] = cls
        ok = bool(interfaces.supports_eagle3(cls))
        results.append({"label": label, "ok": ok,
                        "detail": f"{cls.__module__}.{cls.__qualname__}" + ("" if ok else ": supports_eagle3 is False")})
    return classes


def check_methods(classes, chains, results, getter=GETTER):
    from vllm.model_executor.models import interfaces

    protocol = interfaces.SupportsEagle3
    # A1's Protocol methods are stubs; from 0.18.0 they are default implementations that work
    a1 = getter == GETTER
    for arch, cls in classes.items():
        label = f"{arch}: real EAGLE-3 methods reach the backbone ({STAND_IN})"
        stubs = [n for n in (SETTER, getter) if a1 and getattr(cls, n, None) is getattr(protocol, n, object())]
        if stubs:
            results.append({"label": label, "ok": False,
                            "detail": f"{', '.join(stubs)} is the Protocol's stub (returns None)"})
            continue
        try:
            obj, holders = stand_in_target(cls, chains.get(arch, []))
            backbone = holders[-1]
            ids = (2, 30, 58)
            returned = getattr(obj, SETTER)(ids)
            got = getattr(backbone, "aux_hidden_state_layers", None)
            default = getattr(obj, getter)()
        except Exception as exc:  # noqa: BLE001
            results.append({"label": label, "ok": False, "detail": f"calling them raised {exc!r}"})
            continue
        expected_default = (2, NUM_LAYERS // 2, NUM_LAYERS - 3)
        problems = []
        if returned is not None:
            problems.append(f"the setter returned {returned!r}")
        if tuple(got or ()) != ids:
            problems.append(f"the backbone's aux_hidden_state_layers is {got!r} after set_aux_hidden_state_layers({ids})")
        if default is None or tuple(default) != expected_default:
            problems.append(f"the getter returned {default!r}, expected {expected_default} for {NUM_LAYERS} layers")
        path = " -> ".join([cls.__name__] + [f"{a}: {q.split(':')[1]}" for a, q in chains.get(arch, [])])
        results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or path})


class _StandInSpecConfig:
    """``self`` for ``SpeculativeConfig._verify_args``: an EAGLE-3 request with nothing else set."""

    def __init__(self, model_type: str) -> None:
        self.method = "eagle3"
        self.num_speculative_tokens = 3
        self.tensor_parallel_size = None
        self.draft_tensor_parallel_size = None
        self.disable_by_batch_size = None
        self.draft_model_config = None
        self.target_model_config = types.SimpleNamespace(hf_text_config=types.SimpleNamespace(model_type=model_type))

    def __getattr__(self, name: str):
        if "verify" in name or "validate" in name:
            return lambda *a, **k: None
        return None


def check_speculative_config(model_types, results):
    from vllm.config.speculative import SpeculativeConfig

    validator = SpeculativeConfig.__dict__.get("_verify_args")
    validator = getattr(validator, "__func__", validator)
    for model_type in model_types:
        label = f"vLLM's speculative-config validation accepts an EAGLE-3 target of model type {model_type}"
        if not callable(validator):
            results.append({"label": label, "ok": False, "detail": "SpeculativeConfig._verify_args not found"})
            continue
        try:
            validator(_StandInSpecConfig(model_type))
            results.append({"label": label, "ok": True, "detail": "accepted"})
        except ValueError as exc:
            results.append({"label": label, "ok": False, "detail": str(exc).splitlines()[0]})
        except Exception as exc:  # noqa: BLE001
            results.append({"label": label, "ok": False, "detail": f"could not run the validation: {exc!r}"})


class _Anything:
    """Stands in for any attribute a backbone's forward reads that the probe did not set (a config
    flag, a scaling factor): falsy, callable (returns its first argument), and attribute-transparent."""

    def __getattr__(self, name):
        if name.startswith("__"):  # a protocol probe (torch asks for __torch_function__): not supported
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        import torch

        if len(args) == 2 and all(isinstance(a, torch.Tensor) for a in args):
            # a final norm under another name (jamba.py: final_layernorm(hidden_states, residual)):
            # vLLM's fused norm returns (normed, hidden_states + residual)
            stream = args[0] + args[1]
            return stream, stream
        return args[0] if args else None

    def __bool__(self):
        return False

    # a config number the forward scales by (hyperclovax.py: hidden_states *= config.embedding_multiplier;
    # falcon_h1.py: inputs_embeds * self.embedding_multiplier): the identity, so the streams stay what
    # the stand-in layers fed each other
    def __mul__(self, other):
        return other

    __rmul__ = __mul__

    # a config list the forward indexes or tests membership in (solar.py: config.bskcn_tv[1],
    # i in config.bskcn_1): empty
    def __getitem__(self, key):
        return _Anything()

    def __contains__(self, item):
        return False

    def __iter__(self):
        return iter(())


class _Config:
    """The stand-in backbone's config: what the probe sets, and :class:`_Anything` for the rest."""

    llama_4_scaling = None

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _Flag:
    """Stands in for what a decoder loop reads on a layer besides calling it: a flag (falsy), or a
    method called with the streams (0.33.0 ``step5``: ``layer._add_for_residual(hidden_states,
    residual)`` after the loop), which returns their sum, the residual stream, or the one stream it
    is given. What such a method returns cannot make a capture pass: the probe compares each
    captured state with what the stand-in layers were fed."""

    def __bool__(self):
        return False

    def __call__(self, *args, **kwargs):
        import torch

        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) == 2 and len(args) == 2:
            return tensors[0] + tensors[1]
        if len(tensors) == 1 and len(args) == 1:
            return tensors[0]
        raise TypeError("the stand-in layer has no such method")


def check_forward(backbone_name, results, residual_layers=True, pair=True, pp_flag=None):
    """Run the installed ``forward`` of ``backbone_name`` on stand-in layers and check what it captures.

    The stand-in layers record what they receive, so the reference (the residual stream entering
    layer k) is what the real forward actually fed layer k, whatever it does before the loop
    (embedding scaling, per-model norms). Cases: a later, last stage [2, 8) with ids (2, 5, 8);
    no ids; a non-last stage; the first stage with ids (0, 4). An error raised on a capture line
    (one naming ``aux_hidden_states``) fails the check; any other error means the stand-ins cannot
    drive this model's forward, and the check is reported as not run (information), never as passed.

    A capture patchkit did not write (an interface-only class: the release's own, such as 0.16.0
    ``apertus.py``, which counts ids from 0 on each stage and captures no id n, like that release's
    native ``llama.py``) is held to the release's own semantics: every check on one stage must pass;
    what differs on a later pipeline stage is shown as information (right without pipeline
    parallelism only), as static ``verify`` shows it.
    """
    import torch
    from vllm.sequence import IntermediateTensors

    cls = load(backbone_name)
    label = f"the installed {cls.__name__}.forward captures the residual stream (consistency check on stand-ins)"
    module = sys.modules[cls.forward.__module__]  # where forward is defined (it may be inherited): its get_pp_group
    log = []

    class Layer(torch.nn.Module):
        """The layer contract patchkit read from the release's code (so this is a consistency check, not a
        proof): fused-residual, (h, r) in, (new h, residual stream) out; or, for layers that keep the
        residual inside (granite.py, exaone4.py), h in, the new residual stream out. Records its inputs."""

        def __init__(self, i: int) -> None:
            super().__init__()
            self.i = i

        def forward(self, *args, **kwargs):
            # layers are called (positions, hidden_states, residual) or (hidden_states, position_ids,
            # residual) (bailing_moe.py), positionally or by name: the streams are the 2-D float tensors
            floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() == 2]
            hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else floats.pop(0)
            residual = kwargs["residual"] if "residual" in kwargs else (floats[0] if floats else None)
            entering = hidden_states if residual is None or not residual_layers else hidden_states + residual
            if not residual_layers:
                out = hidden_states * (self.i + 2) + 0.25 * self.i
                log.append((self.i, entering.clone(), out.clone()))
                # a layer that keeps the residual inside but still returns a pair (0.33.0 stablelm.py)
                return (out, torch.zeros_like(out)) if pair else out
            out = entering * (self.i + 2) + 0.25 * self.i
            log.append((self.i, entering.clone(), out + entering))
            return out, entering

        def __getattr__(self, name):
            # a flag the loop reads on the layer (0.33.0 nemotron_nas.py: layer._is_no_op_attention)
            try:
                return super().__getattr__(name)
            except AttributeError:
                if name.startswith("__"):
                    raise
                return _Flag()

    class Norm(torch.nn.Module):
        def forward(self, hidden_states, residual=None):
            if residual is None:
                return hidden_states * 0.5 - 1.0
            stream = hidden_states + residual
            return stream * 0.5 - 1.0, stream

    class Probe(cls):
        """The real class (its real forward), with a fallback for attributes __init__ would have set."""

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return _Anything()

    n = 8
    tokens, width = 3, 4
    positions = torch.arange(tokens)
    h0 = torch.arange(tokens * width, dtype=torch.float64).reshape(tokens, width) / 7.0
    r0 = torch.ones(tokens, width, dtype=torch.float64) * 0.125

    def run(start, end, first, last, ids):
        log.clear()
        obj = blank(Probe)
        obj.layers = torch.nn.ModuleList([Layer(i) for i in range(n)])
        obj.start_layer, obj.end_layer = start, end
        obj.norm = Norm()
        obj.config = _Config()
        obj.aux_hidden_state_layers = tuple(ids)
        group = types.SimpleNamespace(is_first_rank=first, is_last_rank=last, world_size=1)
        saved = module.__dict__.get("get_pp_group")
        module.get_pp_group = lambda: group
        # a forward that reads vLLM's forward context (0.33.0 bailing_moe_linear.py: its attn_metadata,
        # handed to each layer): a stand-in context, as the pipeline group above
        saved_context = module.__dict__.get("get_forward_context")
        if saved_context is not None:
            module.get_forward_context = lambda: _Anything()
        try:
            if first:
                out = call_backbone(cls, obj, positions, None, h0.clone())
            else:
                # a forward whose layers hand on a residual reads it from the previous stage (0.33.0 exaone4.py),
                # whether or not it is part of the stream
                tensors = IntermediateTensors({"hidden_states": h0.clone(), "residual": r0.clone()}
                                              if residual_layers or pair else {"hidden_states": h0.clone()})
                out = call_backbone(cls, obj, positions, tensors, None)
        finally:
            module.get_pp_group = saved
            if saved_context is not None:
                module.get_forward_context = saved_context
        streams = {i: entering for i, entering, _ in log}
        if log:
            streams[log[-1][0] + 1] = log[-1][2]
        return out, streams

    # A3 (0.33.0) backbones that carry aux states between stages capture a stage's first id only on
    # the first stage (the previous stage sends it); everything else captures it locally.
    transport = bool(pp_flag) and bool(getattr(cls, pp_flag, False))  # the name: patchkit.vllm.contract.PP_FLAG
    problems, staged = [], []
    try:
        import inspect

        written = "Added by patchkit" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        written = True
    try:
        plain, _ = run(2, n, False, True, ())
        if not isinstance(plain, torch.Tensor):
            problems.append(f"with no ids requested forward returned {type(plain).__name__}, not the hidden_states tensor")
        ids = (2, 5, n)
        expect = tuple(k for k in ids if k > 2) if transport else ids
        out, streams = run(2, n, False, True, ids)
        if not (isinstance(out, tuple) and len(out) == 2):
            problems.append(f"with ids {ids} on stage [2, {n}) forward returned {type(out).__name__}, not (hidden_states, aux_hidden_states)")
        else:
            hidden, aux = out
            if isinstance(plain, torch.Tensor) and not torch.equal(hidden, plain):
                problems.append("requesting ids changed the returned hidden_states")
            if len(aux) != len(expect):
                staged.append(f"{len(aux)} aux states for ids {ids} (expected {len(expect)}; id n is the final layer output)")
            for k, got in zip(expect, aux):
                if not torch.equal(got, streams[k]):
                    what = "the returned (normed) output" if torch.equal(got, hidden) else "not the residual stream entering that layer"
                    staged.append(f"id {k} on stage [2, {n}): captured {what}")
        out, _ = run(2, 5, False, False, (3,))
        if not isinstance(out, IntermediateTensors):
            problems.append(f"a non-last pipeline stage returned {type(out).__name__}, not its IntermediateTensors")
        # id 0 on the first stage has no residual yet: patchkit's capture takes hidden_states alone there;
        # the release's own (0.16.0 llama.py) adds residual unconditionally and supports ids from 1 only
        first = 0 if written else 1
        out, streams = run(0, n, True, True, (first, 4))
        if not (isinstance(out, tuple) and len(out[1]) == 2 and torch.equal(out[1][0], streams[first])
                and torch.equal(out[1][1], streams[4])):
            problems.append(f"on the first stage ids ({first}, 4) did not return the stream entering layers {first} and 4")
    except Exception as exc:  # noqa: BLE001
        frames = traceback.extract_tb(exc.__traceback__)
        line = frames[-1].line or "" if frames else ""
        if "aux_hidden_states" in line or "_maybe_add_hidden_state" in line:
            problems.append(f"the capture raised {exc!r} at {frames[-1].filename}:{frames[-1].lineno}: {line}")
        else:
            results.append({"label": label, "ok": None, "detail": f"not run: the stand-in layers cannot drive this "
                            f"forward ({exc!r} at {frames[-1].filename.split('/')[-1]}:{frames[-1].lineno})" if frames else repr(exc)})
            return
    if staged and not problems and not written:
        results.append({"label": label, "ok": None, "detail": f"the release's own capture (patchkit wrote none) holds on "
                        f"one stage; on a later pipeline stage: {'; '.join(staged)} (right without pipeline parallelism only)"})
        return
    problems += staged
    results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or
                    f"{cls.__name__}.forward from {module.__file__}: ids (2, 5, n) on stage [2, {n}), no ids, a non-last stage, the first stage"})


PROPOSER = "vllm.v1.spec_decode.eagle:EagleProposer"
"""vLLM's EAGLE proposer (0.10.2 - 0.33.0; from 0.2x its ``load_model`` is inherited from
``SpecDecodeBaseProposer`` in ``v1/spec_decode/llm_base_proposer.py``)."""
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
    import inspect

    import torch

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


def check_load_model(classes, chains, results):
    """Run vLLM's own ``EagleProposer.load_model(target)`` on CPU for each class, with stand-ins.

    The target is a stand-in of the class (no attribute fallback: a missing attribute must fail as
    it would in vLLM) whose holders get a tiny embedding / head where their ``__init__`` builds one.
    The draft stand-in has neither of its own (``has_own_embed_tokens``/``has_own_lm_head`` False,
    the flags the proposer's sharing code reads), so the release must hand it the target's objects:
    the backbone's embedding, and the target's head when it has one. Inside this child only, the
    proposer's module gets ``get_model`` (and the proposer ``_get_model``) returning the draft,
    ``get_layers_from_vllm_config`` returning no layers, and a single-stage ``get_pp_group``.
    A crash is a failed check: the exception's first line and the vLLM ``file:line`` it came from.
    """
    import torch

    proposer_cls = load(PROPOSER)
    module = sys.modules[proposer_cls.load_model.__module__]
    where = short(module.__file__, proposer_cls.load_model.__code__.co_firstlineno)

    class Draft(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Module()
            self.model.embed_tokens = torch.nn.Embedding(VOCAB, WIDTH)
            self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
            self.config = types.SimpleNamespace()
            self.has_own_embed_tokens = False
            self.has_own_lm_head = False

    for arch, cls in classes.items():
        label = f"{arch}: vLLM's EagleProposer.load_model loads a draft and shares embeddings and head (consistency check on stand-ins)"
        draft = Draft()
        own_embed, own_head = draft.model.embed_tokens, draft.lm_head

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
        patches = {"get_model": lambda *a, **k: draft, "get_layers_from_vllm_config": lambda *a, **k: {},
                   "get_pp_group": lambda: types.SimpleNamespace(world_size=1, is_first_rank=True, is_last_rank=True,
                                                                 rank_in_group=0)}
        saved = {name: module.__dict__[name] for name in patches if name in module.__dict__}
        try:
            target, holders = stand_in_target(cls, chains.get(arch, []))
            target.config = _TokenIds()
            placed = give_parts(holders)
            module.__dict__.update(patches)
            try:
                proposer.load_model(target)
            finally:
                for name in patches:
                    module.__dict__.pop(name, None)
                module.__dict__.update(saved)
        except Exception as exc:  # noqa: BLE001 - what vLLM raised is the finding
            frames = traceback.extract_tb(exc.__traceback__)
            results.append({"label": label, "ok": False,
                            "detail": f"load_model raised {one_line(exc)} at {vllm_site(frames)}"})
            continue
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
            problems.append("the draft has no lm_head of its own but kept its unloaded one (the target's "
                            f"head on {type(holders[heads[-1][0]]).__name__} was not shared)")
        elif got_head is not own_head:
            problems.append(f"the target has no lm_head, yet the draft's became {type(got_head).__name__}")
        detail = (f"{where}: load_model ran through; the draft (no embeddings or head of its own) now uses the target's "
                  + " and ".join(shared) + ("" if heads else " (the target has no lm_head: the draft keeps its own)"))
        results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or detail})


def check_wrapper_forward(classes, chains, results):
    """Run the installed ``forward`` of each class that holds its backbone (causal LMs, multimodal
    wrappers) on a stand-in whose backbone returns a known ``(hidden, aux)`` tuple, aux ids set
    with the class's own setter. The class must return that tuple unchanged: the same hidden
    states, and every aux state, in layer order. An error before the backbone ran means the
    stand-ins cannot drive this forward (reported as not run, never as passed); after it, a failure.
    """
    import torch

    for arch, cls in classes.items():
        chain = chains.get(arch, [])
        if not chain:
            continue  # the registered class is the backbone: its forward is check 4
        label = f"{arch}.forward passes the backbone's (hidden_states, aux_hidden_states) through unchanged (consistency check on stand-ins)"
        ids = (2, NUM_LAYERS // 2, NUM_LAYERS - 3)
        hidden = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        aux = {k: torch.full((3, 4), float(k)) for k in ids}
        calls = []
        try:
            obj, holders = stand_in_target(cls, chain, fallback=True)
            backbone = holders[-1]
            # call forward directly (a compile decorator's __call__ reads state __init__ would set)
            backbone.__class__ = type(type(backbone).__name__, (type(backbone),),
                                      {"__call__": lambda self, *a, **k: self.forward(*a, **k)})

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
            modules = {sys.modules[type(h).forward.__module__] for h in holders[:-1]}
            group = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1)
            saved = {m: m.__dict__.get("get_pp_group") for m in modules}
            for m in modules:
                m.get_pp_group = lambda: group
            try:
                out = obj.forward(input_ids=torch.zeros(3, dtype=torch.long), positions=torch.arange(3),
                                  intermediate_tensors=None, inputs_embeds=hidden.clone() * 0)
            finally:
                for m, fn in saved.items():
                    if fn is None:
                        m.__dict__.pop("get_pp_group", None)
                    else:
                        m.get_pp_group = fn
        except Exception as exc:  # noqa: BLE001
            frames = traceback.extract_tb(exc.__traceback__)
            if calls:
                results.append({"label": label, "ok": False, "detail": f"after the backbone returned its tuple, "
                                f"forward raised {one_line(exc)} at {vllm_site(frames)}"})
            else:
                results.append({"label": label, "ok": None, "detail": f"not run: the stand-ins cannot drive this forward "
                                f"({one_line(exc)} at {vllm_site(frames)})"})
            continue
        expected = [aux[k] for k in sorted(ids)]
        problems = []
        if not calls:
            problems.append("forward never called the backbone")
        elif calls[0] != ids:
            problems.append(f"the backbone saw aux ids {calls[0]}, not {ids}")
        if not (isinstance(out, tuple) and len(out) == 2):
            problems.append(f"forward returned {type(out).__name__}, not the (hidden_states, aux_hidden_states) tuple: "
                            "the aux states were dropped")
        else:
            got_hidden, got_aux = out
            if not (got_hidden is hidden or (isinstance(got_hidden, torch.Tensor) and torch.equal(got_hidden, hidden))):
                problems.append("the hidden_states came back changed")
            got_aux = list(got_aux) if isinstance(got_aux, (list, tuple)) else None
            if got_aux is None or len(got_aux) != len(expected) or not all(
                    isinstance(g, torch.Tensor) and (g is e or torch.equal(g, e)) for g, e in zip(got_aux, expected)):
                problems.append(f"the aux states came back changed or reordered (expected layers {sorted(ids)} in order)")
        path = " -> ".join([cls.__name__] + [q.split(":")[1] for _, q in chain])
        results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or
                        f"{cls.__name__}.forward ({short(cls.forward.__code__.co_filename, cls.forward.__code__.co_firstlineno)}, "
                        f"{path}) "
                        f"returned the backbone's hidden states and aux states for ids {ids}, in layer order"})


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        import torch  # noqa: F401
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - the environment cannot run vLLM at all
        print(f"{SENTINEL} {json.dumps({'fatal': repr(exc)})}", flush=True)
        return
    results: list[dict] = []
    classes: dict = {}
    chains = spec.get("chains", {})
    steps = [
        ("registry, supports_eagle3 and the methods",
         lambda: check_methods(classes.update(check_registry(spec["architectures"], results)) or classes, chains,
                               results, spec.get("getter", GETTER))),
        ("speculative-config validation", lambda: check_speculative_config(spec.get("model_types", []), results)),
    ]
    for name, facts in spec.get("backbones", {}).items():
        steps.append((f"{name} forward run",
                      lambda name=name, facts=facts: check_forward(name, results, facts.get("residual", True),
                                                                   facts.get("pair", True), spec.get("pp_flag"))))
    steps.append(("the wrappers' forward", lambda: check_wrapper_forward(classes, chains, results)))
    steps.append(("vLLM's draft loading", lambda: check_load_model(classes, chains, results)))
    for name, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a failing step must still produce a report
            results.append({"label": f"probe step: {name}", "ok": False, "detail": f"{exc!r}"})
    for item in results:  # what a stand-in run can and cannot show: the report says which checks rest on stand-ins
        if item["label"].endswith(f"({STAND_IN})"):
            item["basis"] = "stand-in"
    sys.stdout.flush()
    print(f"{SENTINEL} {json.dumps({'checks': results})}", flush=True)


if __name__ == "__main__":
    main()
