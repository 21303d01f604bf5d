"""``verify --runtime``: run :mod:`patchkit.checks.probe` in a fresh subprocess of the target interpreter.

patchkit's own process never imports vLLM or torch. This module works out statically what the
probe should look at (the registry's classes, what each holds down to the backbone), runs the
probe with the interpreter of the environment that serves the model, and turns its report into
:class:`~patchkit.results.Check` nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from patchkit.plan.spec import TEXT_MODEL_TYPES, default_architectures
from patchkit.errors import InterpreterError, PatchkitError
from patchkit.results import Check, Problem
from patchkit.vllm.classes import loadpath
from patchkit.vllm.chain.capture import expected_stream
from patchkit.vllm.classes.composition import chain
from patchkit.vllm.release.contract import PP_FLAG, Contract, read_allow_list
from patchkit.vllm.classes.loops import decoder_loop
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.runner.generations import SELECTOR
from patchkit.vllm.runner.pins import pins
from patchkit.vllm.runner.serving import declared_flag, serving_runner
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.stream.residual import Stream, StreamVerdict

PROBE = Path(__file__).with_name("probe")
"""The runtime probe: a folder Python runs as a script (``<python> PROBE <JSON>`` runs its ``__main__.py`` with
the folder first on ``sys.path``; see :mod:`patchkit.checks.probe`). It imports only the standard library,
vLLM and torch, never patchkit."""
STAND_IN = "consistency check on stand-ins"
"""The label suffix :mod:`patchkit.checks.probe` gives a check that runs installed code on stand-ins."""
STAND_IN_KIND = "stand-in-consistency"
"""``Check.kind`` (and JSON ``kind``) of such a check: a consistency check, never independent proof."""
SENTINEL = "PATCHKIT-PROBE-RESULT"
TIMEOUT_S = 900
"""Importing vLLM's model modules takes about 10 s on a CPU-only machine; allow for slow disks."""


def probe_spec(
    tree: SourceTree,
    registry: Registry,
    contract: Contract,
    architectures: tuple[str, ...] | None = None,
    model_types: tuple[str, ...] = TEXT_MODEL_TYPES,
) -> dict:
    """The probe's input: the architectures to check, their holder chains, their backbones.

    Args:
        tree, registry, contract: the install's sources, registry and EAGLE-3 contract.
        architectures: registry names (default: the shipped default set's).
        model_types: model types the start-up allow-list must admit (checked only where the
            release has an allow-list).
    Returns:
        ``{"architectures", "chains", "backbones", "getter", "model_types", "pp_flag", "loader", "runner"}``
        (see :mod:`patchkit.checks.probe`): ``loader`` is the draft loader of the runner the serve uses
        (:func:`patchkit.vllm.runner.serving.serving_runner`), None when the install lacks it; ``runner``
        says which runner and why, or "not checked: ..." (then :func:`run_probe` fails the run).
    """
    archs: list[str] = []
    chains: dict[str, list[list[str]]] = {}
    backbones: dict[str, dict] = {}
    for arch in architectures or default_architectures():
        resolution = registry.resolve(arch)
        if resolution is None or resolution.cls is None:
            continue
        if not contract.native and loadpath.bare_language_model(tree, registry, resolution.cls) is not None:
            continue  # not supported on this release (verify says why); nothing to prove at runtime
        archs.append(arch)
        links = chain(tree, registry, resolution.cls)
        chains[arch] = [[attr, f"{cls.module}:{cls.name}"] for attr, cls in links]
        if links:
            backbone = links[-1][1]
            found = tree.find_member(backbone, "forward")
            loop = decoder_loop(found[1]) if found is not None else None  # type: ignore[arg-type]
            read = loop is not None and not isinstance(loop, str)
            # the stand-in layers follow the stream patchkit derived from this release's code (the same
            # decision the capture codemod was planned with): the probe's forward run is a consistency check
            stream = expected_stream(tree, registry, backbone)
            residual = (
                stream.stream is Stream.SUM
                if isinstance(stream, StreamVerdict)
                else loop.returns_residual
                if read
                else True
            )
            pair = (
                loop.tuple_target if read else True
            )  # the call unpacks two values (stablelm.py keeps the residual inside)
            backbones.setdefault(f"{backbone.module}:{backbone.name}", {"residual": residual, "pair": pair})
    types = list(model_types) if read_allow_list(tree) is not None else []
    choice = serving_runner(tree)
    missing = choice.not_checked("the draft loader", "the model runner")
    loader = (
        None
        if missing is not None or choice.generation is None
        else {
            "runner": choice.name,
            "module": choice.generation.loader_module,
            "cls": choice.generation.loader_class,
            "name": choice.generation.loader,
        }
    )
    return {
        "units": unit_facts(tree),
        "architectures": archs,
        "chains": chains,
        "backbones": backbones,
        "getter": contract.getter,
        "model_types": types,
        "pp_flag": PP_FLAG,
        "loader": loader,
        "runner": missing or choice.reason,
    }


UNIT_KIND = "unit-exercised"
"""``Check.kind`` prefix of a declared unit the probe exercised: ``unit-exercised:<key>``."""


def unit_facts(tree: SourceTree) -> dict[str, dict]:
    """The declared units (:mod:`patchkit.vllm.runner.units`) the install holds, with what the probe needs to
    exercise them: the flag's name and its declared default for the selector."""
    out: dict[str, dict] = {}
    for found in pins(tree).found:
        if found.relpath is None:
            continue
        facts: dict = {}
        if found.unit.key == "selector-default":
            declared, default = declared_flag(tree)
            if not declared or default is None:
                continue
            facts = {"flag": SELECTOR, "default": default}
        out[found.unit.key] = facts
    return out


def exercised_units(check: Check) -> dict[str, bool | None]:
    """The units ``check`` (:func:`run_probe`'s) exercised, by key, with their results."""
    return {c.kind.split(":", 1)[1]: c.ok for c in check.children if c.kind and c.kind.startswith(f"{UNIT_KIND}:")}


def verify_probe(
    python: Path, tree: SourceTree, registry: Registry, contract: Contract, archs, types
) -> tuple[Check | None, Problem | None, list[str]]:
    """``verify --runtime``'s probe (:func:`run_probe` on :func:`probe_spec`), run before the static checks:
    ``(check, None, settled)`` with the keys of the units it exercised that did what patchkit assumes, or
    ``(None, problem, [])`` when it cannot run (the static checks are kept, the units stay not checked)."""
    try:
        probe = run_probe(python, probe_spec(tree, registry, contract, archs, types))
    except PatchkitError as exc:
        return None, Problem(exc.message, exc.hint, int(exc.exit_code)), []
    return probe, None, [key for key, ok in exercised_units(probe).items() if ok]


def run_units(python: Path, tree: SourceTree) -> Check:
    """Exercise only the declared units the install holds (``doctor --python`` on a release whose units
    changed): :func:`run_probe` with ``{"units": ..., "only_units": True}``.

    Raises:
        InterpreterError: as :func:`run_probe`.
    """
    return run_probe(python, {"units": unit_facts(tree), "only_units": True, "runner": "not looked at"})


def run_probe(python: Path, spec: dict) -> Check:
    """Run the probe with ``python`` and return one :class:`Check` whose children are its checks.

    Args:
        python: the target environment's interpreter.
        spec: from :func:`probe_spec`.
    Raises:
        InterpreterError: the interpreter cannot be started, or cannot import vLLM and torch.
    """
    label = f"runtime: vLLM's own code, run by {python}"
    detail = (
        "a fresh subprocess; patchkit imports neither vLLM nor torch; checks marked "
        f"'{STAND_IN}' run the installed code on stand-ins built on patchkit's own reading of the "
        "layer contract: they show the written code consistent with it, not that it is right; "
        f"model runner {spec.get('runner', '?')}"
    )
    children: list[Check] = []
    if spec.get("loader") is None and not spec.get("only_units"):  # no draft loader in the install: not checked
        children.append(Check("vLLM's draft loading", False, spec.get("runner") or "not checked: no draft loader"))
        spec = {**spec, "skip_loading": True}
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", PYTHONDONTWRITEBYTECODE="1")
    try:
        proc = subprocess.run(
            [str(python), str(PROBE), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except OSError as exc:
        raise InterpreterError(
            f"--python {python} could not be run: {exc}", "give the serving environment's python"
        ) from exc
    except subprocess.TimeoutExpired:
        return Check(label, False, f"the probe did not finish in {TIMEOUT_S} s", children=children)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(SENTINEL)), None)
    if line is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return Check(label, False, f"the probe exited {proc.returncode} without a report: {tail}", children=children)
    report = json.loads(line[len(SENTINEL) :])
    if "fatal" in report:
        raise InterpreterError(
            f"{python} cannot import vLLM and torch: {report['fatal']}",
            "verify --runtime needs the serving environment itself, with vLLM and its dependencies installed",
        )
    for item in report["checks"]:
        ok = None if item["ok"] is None else bool(item["ok"])  # None: a check the probe could not run
        kind = STAND_IN_KIND if item.get("basis") == "stand-in" else None
        kind = f"{UNIT_KIND}:{item['unit']}" if item.get("unit") else kind
        children.append(Check(item["label"], ok, item.get("detail", ""), kind=kind))
    ok = all(c.ok is not False for c in children) and any(c.ok for c in children)
    return Check(label, ok, detail, children=children)
