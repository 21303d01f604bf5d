"""Check 4 of the runtime probe: the backbone's installed ``forward`` on a tiny stand-in (see this
folder's ``__init__.py``).
"""

from __future__ import annotations

import inspect
import sys
import traceback
import types

from probe_standins import _Anything, _Config, _Flag, blank, call_backbone, load


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
    import torch  # lazy: torch exists only in the target environment (__main__ reports its absence)

    cls = load(backbone_name)
    label = f"the installed {cls.__name__}.forward captures the residual stream (consistency check on stand-ins)"
    module = sys.modules[cls.forward.__module__]  # where forward is defined (it may be inherited): its get_pp_group
    n = 8
    run = _runner(cls, module, n, residual_layers, pair)
    # A3 (0.33.0) backbones that carry aux states between stages capture a stage's first id only on
    # the first stage (the previous stage sends it); everything else captures it locally.
    transport = bool(pp_flag) and bool(getattr(cls, pp_flag, False))  # the name: patchkit.vllm.release.contract.PP_FLAG
    problems, staged = [], []
    try:
        written = "Added by patchkit" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        written = True
    try:
        _check_stages(run, torch, n, transport, written, problems, staged)
    except Exception as exc:  # noqa: BLE001
        frames = traceback.extract_tb(exc.__traceback__)
        line = frames[-1].line or "" if frames else ""
        if "aux_hidden_states" in line or "_maybe_add_hidden_state" in line:
            problems.append(f"the capture raised {exc!r} at {frames[-1].filename}:{frames[-1].lineno}: {line}")
        else:
            results.append(
                {
                    "label": label,
                    "ok": None,
                    "detail": f"not run: the stand-in layers cannot drive this "
                    f"forward ({exc!r} at {frames[-1].filename.split('/')[-1]}:{frames[-1].lineno})"
                    if frames
                    else repr(exc),
                }
            )
            return
    if staged and not problems and not written:
        results.append(
            {
                "label": label,
                "ok": None,
                "detail": f"the release's own capture (patchkit wrote none) holds on "
                f"one stage; on a later pipeline stage: {'; '.join(staged)} (right without pipeline parallelism only)",
            }
        )
        return
    problems += staged
    results.append(
        {
            "label": label,
            "ok": not problems,
            "detail": "; ".join(problems)
            or f"{cls.__name__}.forward from {module.__file__}: ids (2, 5, n) on stage [2, {n}), no ids, "
            "a non-last stage, the first stage",
        }
    )


def _check_stages(run, torch, n: int, transport: bool, written: bool, problems: list, staged: list) -> None:
    """The four cases of :func:`check_forward` on ``run``'s stand-ins: what fails goes to ``problems``,
    what differs on a later pipeline stage to ``staged``. Errors propagate (the caller tells a capture
    line's error from stand-ins that cannot drive the forward)."""
    from vllm.sequence import IntermediateTensors  # lazy: vLLM exists only in the target environment

    plain, _ = run(2, n, False, True, ())
    if not isinstance(plain, torch.Tensor):
        problems.append(f"with no ids requested forward returned {type(plain).__name__}, not the hidden_states tensor")
    ids = (2, 5, n)
    expect = tuple(k for k in ids if k > 2) if transport else ids
    out, streams = run(2, n, False, True, ids)
    if not (isinstance(out, tuple) and len(out) == 2):
        problems.append(
            f"with ids {ids} on stage [2, {n}) forward returned {type(out).__name__}, "
            "not (hidden_states, aux_hidden_states)"
        )
    else:
        hidden, aux = out
        if isinstance(plain, torch.Tensor) and not torch.equal(hidden, plain):
            problems.append("requesting ids changed the returned hidden_states")
        if len(aux) != len(expect):
            staged.append(
                f"{len(aux)} aux states for ids {ids} (expected {len(expect)}; id n is the final layer output)"
            )
        for k, got in zip(expect, aux):
            if not torch.equal(got, streams[k]):
                what = (
                    "the returned (normed) output"
                    if torch.equal(got, hidden)
                    else "not the residual stream entering that layer"
                )
                staged.append(f"id {k} on stage [2, {n}): captured {what}")
    out, _ = run(2, 5, False, False, (3,))
    if not isinstance(out, IntermediateTensors):
        problems.append(f"a non-last pipeline stage returned {type(out).__name__}, not its IntermediateTensors")
    # id 0 on the first stage has no residual yet: patchkit's capture takes hidden_states alone there;
    # the release's own (0.16.0 llama.py) adds residual unconditionally and supports ids from 1 only
    first = 0 if written else 1
    out, streams = run(0, n, True, True, (first, 4))
    if not (
        isinstance(out, tuple)
        and len(out[1]) == 2
        and torch.equal(out[1][0], streams[first])
        and torch.equal(out[1][1], streams[4])
    ):
        problems.append(f"on the first stage ids ({first}, 4) did not return the stream entering layers {first} and 4")


def _runner(cls, module, n: int, residual_layers: bool, pair: bool):
    """``run(start, end, first, last, ids)``: the real ``cls.forward`` on ``n`` stand-in layers as one
    pipeline stage, returning its output and the residual stream entering each layer (by id)."""
    import torch  # lazy: torch exists only in the target environment
    from vllm.sequence import IntermediateTensors  # lazy: vLLM exists only in the target environment

    log = []
    Layer, Norm = _stand_in_layer(log, residual_layers, pair), _stand_in_norm()

    class Probe(cls):
        """The real class (its real forward), with a fallback for attributes __init__ would have set."""

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return _Anything()

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
                tensors = IntermediateTensors(
                    {"hidden_states": h0.clone(), "residual": r0.clone()}
                    if residual_layers or pair
                    else {"hidden_states": h0.clone()}
                )
                out = call_backbone(cls, obj, positions, tensors, None)
        finally:
            module.get_pp_group = saved
            if saved_context is not None:
                module.get_forward_context = saved_context
        streams = {i: entering for i, entering, _ in log}
        if log:
            streams[log[-1][0] + 1] = log[-1][2]
        return out, streams

    return run


def _stand_in_layer(log: list, residual_layers: bool, pair: bool):
    """The stand-in decoder layer class; each call appends ``(i, stream entering, stream after)`` to ``log``."""
    import torch  # lazy: torch exists only in the target environment

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

    return Layer


def _stand_in_norm():
    """The stand-in final norm class (fused-residual or not)."""
    import torch  # lazy: torch exists only in the target environment

    class Norm(torch.nn.Module):
        def forward(self, hidden_states, residual=None):
            if residual is None:
                return hidden_states * 0.5 - 1.0
            stream = hidden_states + residual
            return stream * 0.5 - 1.0, stream

    return Norm
