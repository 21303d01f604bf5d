"""Runtime probe: asks the installed vLLM itself whether EAGLE-3 is in effect. Run by ``verify --runtime``.

This file is executed as a script by the *target* interpreter (the environment that serves the
model), in a fresh subprocess, never inside patchkit's own process. It imports only the standard
library and what that environment already has (vLLM, torch). It must not import patchkit.

Input: one JSON argument::

    {"architectures": ["DeepseekV2ForCausalLM", ...],
     "chains": {"KimiK25ForConditionalGeneration": [["language_model", "mod:Class"], ["model", "mod:Class"]], ...},
     "backbones": {"vllm.model_executor.models.deepseek_v2:DeepseekV2Model": {"residual": true}, ...},
     "getter": "get_eagle3_aux_hidden_state_layers",
     "model_types": ["deepseek_v3", "kimi_k2"]}

``getter`` is the release's aux-layer getter (A1: ``get_eagle3_aux_hidden_state_layers``; 0.18.0
on: ``get_eagle3_default_aux_hidden_state_layers``); ``residual`` says whether the backbone's
layers return ``(hidden_states, residual)`` (else ``hidden_states`` alone).

Output: a line ``PATCHKIT-PROBE-RESULT {"checks": [{"label", "ok", "detail"}, ...]}`` on stdout
(vLLM's own log lines may come before it).

Checks, each independent (facts from vLLM 0.10.2 - 0.33.0):

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
   layer order, and with no ids the return value must be exactly the unpatched result.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
import types

SENTINEL = "PATCHKIT-PROBE-RESULT"
SETTER = "set_aux_hidden_state_layers"
GETTER = "get_eagle3_aux_hidden_state_layers"
NUM_LAYERS = 61  # DeepSeek-V3 / Kimi-K2: default ids (2, 30, 58)


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
        label = f"{arch}: real EAGLE-3 methods reach the backbone"
        stubs = [n for n in (SETTER, getter) if a1 and getattr(cls, n, None) is getattr(protocol, n, object())]
        if stubs:
            results.append({"label": label, "ok": False,
                            "detail": f"{', '.join(stubs)} is the Protocol's stub (returns None)"})
            continue
        try:
            obj = blank(cls)
            holder = obj
            chain = chains.get(arch, [])
            for i, (attr, qualified) in enumerate(chain):
                held_cls = load(qualified)
                held = stand_in_backbone(held_cls, NUM_LAYERS) if i == len(chain) - 1 else blank(held_cls)
                setattr(holder, attr, held)
                holder = held
            backbone = holder
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
        return _Anything()

    def __call__(self, *args, **kwargs):
        return args[0] if args else None

    def __bool__(self):
        return False


def check_forward(backbone_name, results, residual_layers=True):
    """Run the installed ``forward`` of ``backbone_name`` on stand-in layers and check what it captures.

    The stand-in layers record what they receive, so the reference (the residual stream entering
    layer k) is what the real forward actually fed layer k, whatever it does before the loop
    (embedding scaling, per-model norms). Cases: a later, last stage [2, 8) with ids (2, 5, 8);
    no ids; a non-last stage; the first stage with ids (0, 4). An error raised on a capture line
    (one naming ``aux_hidden_states``) fails the check; any other error means the stand-ins cannot
    drive this model's forward, and the check is reported as not run (information), never as passed.
    """
    import torch
    from vllm.sequence import IntermediateTensors

    cls = load(backbone_name)
    label = f"the installed {cls.__name__}.forward captures the residual stream (stand-in run)"
    module = sys.modules[cls.forward.__module__]  # where forward is defined (it may be inherited): its get_pp_group
    log = []

    class Layer(torch.nn.Module):
        """vLLM's decoder-layer contract: (h, r) in, (new h, residual stream) out; or, for layers
        that keep the residual inside (granite.py), h in, the new residual stream out. Records its inputs."""

        def __init__(self, i: int) -> None:
            super().__init__()
            self.i = i

        def forward(self, positions, hidden_states, residual=None, *args, **kwargs):
            entering = hidden_states if residual is None or not residual_layers else hidden_states + residual
            if not residual_layers:
                out = hidden_states * (self.i + 2) + 0.25 * self.i
                log.append((self.i, entering.clone(), out.clone()))
                return out
            out = entering * (self.i + 2) + 0.25 * self.i
            log.append((self.i, entering.clone(), out + entering))
            return out, entering

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
        obj.config = types.SimpleNamespace(llama_4_scaling=None)
        obj.aux_hidden_state_layers = tuple(ids)
        group = types.SimpleNamespace(is_first_rank=first, is_last_rank=last, world_size=1)
        saved = module.__dict__.get("get_pp_group")
        module.get_pp_group = lambda: group
        try:
            if first:
                out = cls.forward(obj, input_ids=None, positions=positions, intermediate_tensors=None, inputs_embeds=h0.clone())
            else:
                tensors = IntermediateTensors({"hidden_states": h0.clone(), "residual": r0.clone()} if residual_layers
                                              else {"hidden_states": h0.clone()})
                out = cls.forward(obj, input_ids=None, positions=positions, intermediate_tensors=tensors, inputs_embeds=None)
        finally:
            module.get_pp_group = saved
        streams = {i: entering for i, entering, _ in log}
        if log:
            streams[log[-1][0] + 1] = log[-1][2]
        return out, streams

    # A3 (0.33.0) backbones that carry aux states between stages capture a stage's first id only on
    # the first stage (the previous stage sends it); everything else captures it locally.
    transport = bool(getattr(cls, "supports_aux_hidden_states_over_pp", False))
    problems = []
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
                problems.append(f"{len(aux)} aux states for ids {ids} (expected {len(expect)}; id n is the final layer output)")
            for k, got in zip(expect, aux):
                if not torch.equal(got, streams[k]):
                    what = "the returned (normed) output" if torch.equal(got, hidden) else "not the residual stream entering that layer"
                    problems.append(f"id {k} on stage [2, {n}): captured {what}")
        out, _ = run(2, 5, False, False, (3,))
        if not isinstance(out, IntermediateTensors):
            problems.append(f"a non-last pipeline stage returned {type(out).__name__}, not its IntermediateTensors")
        out, streams = run(0, n, True, True, (0, 4))
        if not (isinstance(out, tuple) and len(out[1]) == 2 and torch.equal(out[1][0], streams[0])
                and torch.equal(out[1][1], streams[4])):
            problems.append("on the first stage ids (0, 4) did not return the stream entering layers 0 and 4")
    except Exception as exc:  # noqa: BLE001
        frames = traceback.extract_tb(exc.__traceback__)
        line = frames[-1].line or "" if frames else ""
        if "aux_hidden_states" in line or "_maybe_add_hidden_state" in line:
            problems.append(f"the capture raised {exc!r} at {frames[-1].filename}:{frames[-1].lineno}: {line}")
        else:
            results.append({"label": label, "ok": None, "detail": f"not run: the stand-in layers cannot drive this "
                            f"forward ({exc!r} at {frames[-1].filename.split('/')[-1]}:{frames[-1].lineno})" if frames else repr(exc)})
            return
    results.append({"label": label, "ok": not problems, "detail": "; ".join(problems) or
                    f"{cls.__name__}.forward from {module.__file__}: ids (2, 5, n) on stage [2, {n}), no ids, a non-last stage, the first stage"})


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        import torch  # noqa: F401
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - the environment cannot run vLLM at all
        print(f"{SENTINEL} {json.dumps({'fatal': repr(exc)})}", flush=True)
        return
    results: list[dict] = []
    steps = [
        ("registry, supports_eagle3 and the methods",
         lambda: check_methods(check_registry(spec["architectures"], results), spec.get("chains", {}), results,
                               spec.get("getter", GETTER))),
        ("speculative-config validation", lambda: check_speculative_config(spec.get("model_types", []), results)),
    ]
    for name, facts in spec.get("backbones", {}).items():
        steps.append((f"{name} forward run",
                      lambda name=name, facts=facts: check_forward(name, results, facts.get("residual", True))))
    for name, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a failing step must still produce a report
            results.append({"label": f"probe step: {name}", "ok": False, "detail": f"{exc!r}"})
    sys.stdout.flush()
    print(f"{SENTINEL} {json.dumps({'checks': results})}", flush=True)


if __name__ == "__main__":
    main()
