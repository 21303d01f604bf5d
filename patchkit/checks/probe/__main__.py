"""The runtime probe's entry point: ``<python> <this folder> <JSON>`` (see this folder's ``__init__.py``)."""

from __future__ import annotations

import json
import sys

from probe_forward import check_forward
from probe_interface import check_methods, check_registry, check_speculative_config
from probe_loading import check_load_model, check_wrapper_forward
from probe_standins import GETTER, SENTINEL, STAND_IN
from probe_units import check_units


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        import torch  # noqa: F401  # lazy: torch exists only in the target environment; its absence is reported
        import vllm  # noqa: F401  # lazy: as torch
    except Exception as exc:  # noqa: BLE001 - the environment cannot run vLLM at all
        print(f"{SENTINEL} {json.dumps({'fatal': repr(exc)})}", flush=True)
        return
    results: list[dict] = []
    classes: dict = {}
    chains = spec.get("chains", {})
    steps = [
        (
            "registry, supports_eagle3 and the methods",
            lambda: check_methods(
                classes.update(check_registry(spec["architectures"], results)) or classes,
                chains,
                results,
                spec.get("getter", GETTER),
            ),
        ),
        ("speculative-config validation", lambda: check_speculative_config(spec.get("model_types", []), results)),
        ("the declared vLLM units", lambda: check_units(spec.get("units", {}), results)),
    ]
    if spec.get("only_units"):  # doctor --python: the changed units alone
        steps = steps[-1:]
    else:
        for name, facts in spec.get("backbones", {}).items():
            steps.append(
                (
                    f"{name} forward run",
                    lambda name=name, facts=facts: check_forward(
                        name, results, facts.get("residual", True), facts.get("pair", True), spec.get("pp_flag")
                    ),
                )
            )
        steps.append(("the wrappers' forward", lambda: check_wrapper_forward(classes, chains, results)))
        if not spec.get("skip_loading"):  # patchkit found no draft loader in the install: it reports that itself
            steps.append(
                ("vLLM's draft loading", lambda: check_load_model(classes, chains, results, spec.get("loader")))
            )
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
