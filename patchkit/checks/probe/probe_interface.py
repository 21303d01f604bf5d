"""Checks 1 - 3 of the runtime probe: the registry and ``supports_eagle3``, the EAGLE-3 methods, and
vLLM's own speculative-config validation (see this folder's ``__init__.py``).
"""

from __future__ import annotations

import types

from probe_standins import GETTER, NUM_LAYERS, SETTER, STAND_IN, stand_in_target


def check_registry(archs, results):
    from vllm.model_executor.models import (
        interfaces,
    )  # lazy: vLLM exists only in the target environment (__main__ reports its absence)
    from vllm.model_executor.models.registry import (
        ModelRegistry,
    )  # lazy: vLLM exists only in the target environment (__main__ reports its absence)

    classes = {}
    for arch in archs:
        label = f"vLLM's supports_eagle3 accepts {arch}"
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # noqa: BLE001 - report whatever vLLM raised
            results.append({"label": label, "ok": False, "detail": f"the registry could not load it: {exc!r}"})
            continue
        if cls is None:
            results.append(
                {
                    "label": label,
                    "ok": False,
                    "detail": "the registry could not load it" + _load_error(ModelRegistry, arch),
                }
            )
            continue
        classes[arch] = cls
        ok = bool(interfaces.supports_eagle3(cls))
        results.append(
            {
                "label": label,
                "ok": ok,
                "detail": f"{cls.__module__}.{cls.__qualname__}" + ("" if ok else ": supports_eagle3 is False"),
            }
        )
    return classes


def _load_error(registry, arch):
    """Why vLLM's registry gave None for ``arch``: ``": <exception repr>"``, or ``""`` when that
    cannot be found out.

    vLLM's ``_try_load_model_cls`` (``model_executor/models/registry.py``, 0.10.2 to 0.33.0 at
    least) catches the import's exception, logs it and returns None; the entry in
    ``registry.models`` has ``load_model_cls()``, which imports the module again and raises it.
    """
    entry = getattr(registry, "models", {}).get(arch)
    load = getattr(entry, "load_model_cls", None)
    if load is None:
        return ""
    try:
        load()
    except Exception as exc:  # noqa: BLE001 - report whatever the import raised
        return f": {exc!r}"[:500]
    return ""


def check_methods(classes, chains, results, getter=GETTER):
    from vllm.model_executor.models import (
        interfaces,
    )  # lazy: vLLM exists only in the target environment (__main__ reports its absence)

    protocol = interfaces.SupportsEagle3
    # A1's Protocol methods are stubs; from 0.18.0 they are default implementations that work
    a1 = getter == GETTER
    for arch, cls in classes.items():
        label = f"{arch}: real EAGLE-3 methods reach the backbone ({STAND_IN})"
        stubs = [n for n in (SETTER, getter) if a1 and getattr(cls, n, None) is getattr(protocol, n, object())]
        if stubs:
            results.append(
                {"label": label, "ok": False, "detail": f"{', '.join(stubs)} is the Protocol's stub (returns None)"}
            )
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
            problems.append(
                f"the backbone's aux_hidden_state_layers is {got!r} after set_aux_hidden_state_layers({ids})"
            )
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
    from vllm.config.speculative import (
        SpeculativeConfig,
    )  # lazy: vLLM exists only in the target environment (__main__ reports its absence)

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
