"""The runtime probe's exercise of the declared vLLM units (issue 39; see this folder's ``__init__.py``).

Each exercise runs the installed unit on a plain input and compares what it *does* with what patchkit
assumes of it (``patchkit/vllm/runner/units.py``, where each unit's assumption is written). The answer rests
on the unit's own behaviour, not on patchkit's reading of its code, so it settles a "not checked" that a
changed fingerprint left. Input (``spec["units"]``): ``{key: facts}`` for the units the install holds;
output: one result per unit, ``{"label", "ok", "detail", "unit": key}``; ``ok`` None when the exercise
could not run (the unit stays not checked).
"""

from __future__ import annotations

import os
import types

IDS = [2, 5, 7]
"""The draft ids the readers are given (top level, vLLM's convention): patchkit assumes they come back unchanged."""


def check_units(units, results):
    """Exercise every unit named in ``units`` that this probe knows, appending one result each."""
    for key, facts in sorted(units.items()):
        exercise = EXERCISES.get(key)
        if exercise is None:
            continue
        label = f"vLLM unit {key} does what patchkit assumes (exercised)"
        try:
            ok, detail = exercise(facts)
        except Exception as exc:  # noqa: BLE001 - a unit that raises on plain input is not what patchkit assumes
            ok, detail = False, f"raised {exc!r}"
        results.append({"label": label, "ok": ok, "detail": detail, "unit": key})


def _capture_helper(facts):
    """``EagleModelMixin._maybe_add_hidden_state``: appends hidden + residual (hidden alone without a
    residual) for an aux layer, nothing otherwise, and returns the list it was given."""
    import torch  # lazy: torch exists only in the target environment
    from vllm.model_executor.models import interfaces  # lazy: vLLM exists only in the target environment

    class Backbone(interfaces.EagleModelMixin):
        start_layer = 0

    model = Backbone.__new__(Backbone)
    setter = getattr(model, "_set_aux_hidden_state_layers", None)
    if setter is not None:
        setter((1,))
    else:
        model.aux_hidden_state_layers = (1,)
    hidden, residual = torch.ones(2, 3), torch.full((2, 3), 2.0)
    given = []
    out = model._maybe_add_hidden_state(given, 1, hidden, residual)
    if out is not given or len(given) != 1 or not torch.equal(given[0], hidden + residual):
        return False, f"for aux layer 1 it returned {_describe(out)} with the list given holding {_describe(given)}"
    other = model._maybe_add_hidden_state([], 0, hidden, residual)
    alone = model._maybe_add_hidden_state([], 1, hidden, None)
    if other != [] or len(alone) != 1 or not torch.equal(alone[0], hidden):
        return False, f"for layer 0 it returned {_describe(other)}, without a residual {_describe(alone)}"
    return (
        True,
        "appends hidden_states + residual for an aux layer (hidden_states alone without one) and returns the list",
    )


def _config(**fields):
    """A speculative config whose draft config holds ``fields``."""
    hf = types.SimpleNamespace(**fields)
    return types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=hf))


def _v2_reader(facts):
    """``get_eagle3_aux_layers_from_config`` returns the draft's top-level ids unchanged."""
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils  # lazy: vLLM exists only in the target environment

    got = eagle3_utils.get_eagle3_aux_layers_from_config(_config(eagle_aux_hidden_state_layer_ids=list(IDS)))
    return _same_ids(got)


def _v1_reader(facts):
    """``GPUModelRunner._get_eagle3_aux_layers_from_config`` returns the draft's top-level ids unchanged."""
    from vllm.v1.worker import gpu_model_runner  # lazy: vLLM exists only in the target environment

    runner = types.SimpleNamespace(speculative_config=_config(eagle_aux_hidden_state_layer_ids=list(IDS)))
    got = gpu_model_runner.GPUModelRunner._get_eagle3_aux_layers_from_config(runner)
    return _same_ids(got)


def _selector_default(facts):
    """``VLLM_USE_V2_MODEL_RUNNER`` unset reads as the default patchkit read in ``envs.py``."""
    name = facts["flag"]
    os.environ.pop(name, None)
    import vllm.envs as envs  # lazy: vLLM exists only in the target environment

    got = getattr(envs, name)
    want = facts["default"]
    return repr(got) == want, f"{name} unset reads {got!r}; patchkit read the declared default {want}"


def _same_ids(got):
    ok = got is not None and list(got) == IDS
    return ok, f"draft ids {IDS} at the top level read as {_describe(got)}" + ("" if ok else f", not {IDS}")


def _describe(value):
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


EXERCISES = {
    "capture-helper": _capture_helper,
    "v2-reader": _v2_reader,
    "v1-reader": _v1_reader,
    "selector-default": _selector_default,
}
"""The units this probe can exercise, by key (``patchkit.vllm.runner.units``)."""
