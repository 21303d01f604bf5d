"""``resolve --target sglang ARCH``: an architecture through SGLang's registry, read statically (issue 44).

The registry entry (:func:`patchkit.sglang.registry.entries`: the module whose ``EntryClass`` names it, the class
statement it resolves to), the class's bases (:meth:`~patchkit.sglang.classes.Package.lineage`), its scan state
(:func:`patchkit.sglang.states.classify`), and the chain SGLang's model runner follows, each link with its
``file:line`` below site-packages:

1. **wrapper**: the registered class;
2. **model**: the class the wrapper's lineage assigns to ``self.model`` (``self.model = MixtralModel(...)``; Llama's
   ``self.model = self._init_model(...)`` followed to the class that method returns); none when no such assignment
   names a class of the package (multimodal wrappers build ``self.language_model`` instead);
3. **layers**: the class the model's ``self.layers = ...`` builds (``make_layers(..., lambda idx, prefix:
   MixtralDecoderLayer(...))``, ``nn.ModuleList([...])``): the first class of the package called in that value.

``ast`` only; nothing imported, nothing written. Exit 0 when the registry holds the architecture, 1 when it does not
(the closest names suggested), as vLLM's ``resolve``.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

from patchkit.errors import ExitCode
from patchkit.sglang import contract as c
from patchkit.sglang.classes import ClassRef, Package
from patchkit.sglang.install import SglangInstall
from patchkit.sglang.registry import entries, not_generative
from patchkit.sglang.states import classify


@dataclass(frozen=True)
class Link:
    """One link of the chain: its role (``wrapper``, ``model``, ``layers``), the class, and where it is."""

    role: str
    cls: str
    file: str
    line: int

    def to_dict(self) -> dict:
        return {"role": self.role, "class": self.cls, "file": self.file, "line": self.line}


@dataclass(frozen=True)
class Resolution:
    """``resolve --target sglang``'s result; ``module`` is None (and the chain empty) when not registered."""

    install: SglangInstall
    architecture: str
    module: str | None
    state: str | None
    bases: tuple[str, ...]
    chain: tuple[Link, ...]
    suggestions: tuple[str, ...]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.module is not None else ExitCode.NOT_IN_EFFECT

    def to_dict(self) -> dict:
        return {
            "command": "resolve",
            "target": c.DISTRIBUTION,
            "version": str(self.install.version),
            "architecture": self.architecture,
            "registered": self.module is not None,
            "module": self.module,
            "state": self.state,
            "bases": list(self.bases),
            "chain": [k.to_dict() for k in self.chain],
            "suggestions": list(self.suggestions),
        }


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    """An assignment's targets, tuples unpacked (``self.layers, self.start_layer, self.end_layer = ...``)."""
    out: list[ast.expr] = []
    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
        out.extend(t.elts if isinstance(t, ast.Tuple) else [t])
    return out


def _assigned(cls: ClassRef, attribute: str) -> list[ast.expr]:
    """The values ``cls``'s own body assigns to ``self.<attribute>``."""
    return [
        node.value
        for node in ast.walk(cls.node)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None
        and any(
            isinstance(t, ast.Attribute)
            and t.attr == attribute
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
            for t in _targets(node)
        )
    ]


def _method(cls: ClassRef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.node.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _called_class(package: Package, here: ClassRef, value: ast.expr, lineage: tuple[ClassRef, ...]) -> ClassRef | None:
    """The first class of the package ``value`` calls; ``self.m(...)`` follows the ``return`` of method ``m``."""
    for node in ast.walk(value):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            for owner in lineage:
                method = _method(owner, func.attr)
                returns = [r.value for r in ast.walk(method) if isinstance(r, ast.Return) and r.value] if method else []
                found = next((k for r in returns if (k := _called_class(package, owner, r, ())) is not None), None)
                if found is not None:
                    return found
        elif isinstance(func, (ast.Name, ast.Attribute)):
            found = package.expression(here.module, func)
            if found is not None:
                return found
    return None


def _built(package: Package, cls: ClassRef, attribute: str) -> tuple[ClassRef, ClassRef, int] | None:
    """``(class assigning it, class built, line)`` for ``self.<attribute> = ...`` in ``cls``'s lineage, or None."""
    lineage = package.lineage(cls)
    for here in lineage:
        for value in _assigned(here, attribute):
            found = _called_class(package, here, value, lineage)
            if found is not None:
                return here, found, value.lineno
    return None


def resolve(install: SglangInstall, architecture: str) -> Resolution:
    """``architecture`` through SGLang's registry: its module, state, bases and chain (the module docstring).

    Raises:
        InstallNotFound: no SGLang package in the install (exit 4).
    """
    package = Package(install.site_packages, c.PACKAGE)
    found = {e.architecture: e for e in entries(package)}
    entry = found.get(architecture)
    if entry is None or entry.cls is None:
        close = tuple(difflib.get_close_matches(architecture, list(found), n=3))
        return Resolution(install, architecture, None, None, (), (), close)

    def where(cls: ClassRef) -> str:
        return package.path(cls.module).relative_to(install.site_packages).as_posix()

    pooling = not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)
    state = classify(package, entry, pooling).state.value
    bases = tuple(k.qualname for k in package.lineage(entry.cls)[1:])
    chain = [Link("wrapper", entry.cls.qualname, where(entry.cls), entry.cls.node.lineno)]
    model = _built(package, entry.cls, "model")
    if model is not None:
        chain.append(Link("model", model[1].qualname, where(model[1]), model[1].node.lineno))
        layers = _built(package, model[1], "layers")
        if layers is not None:
            chain.append(Link("layers", layers[1].qualname, where(layers[1]), layers[1].node.lineno))
    return Resolution(install, architecture, entry.registered_in, state, bases, tuple(chain), ())


__all__ = ["Link", "Resolution", "resolve"]
