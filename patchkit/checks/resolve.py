"""``patchkit resolve``: one architecture name through the installed release's registry, read statically.

Facts: the registry (:mod:`patchkit.vllm.registry.table`, ``vllm/model_executor/models/registry.py``,
0.10.2 - 0.33.0) and the per-platform branches of 0.22.0 - 0.33.0 (:mod:`patchkit.vllm.registry.platforms`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.plan.request import check_architecture, suggestions
from patchkit.results import InstallInfo
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.registry import platforms
from patchkit.vllm.chain import links
from patchkit.vllm.release.contract import install_info
from patchkit.vllm.release.install import Install
from patchkit.vllm.registry.table import Registry, Resolution
from patchkit.vllm.release.source import ClassRef, SourceTree


@dataclass
class ResolveReport:
    """Result of ``resolve``.

    Attributes:
        architecture: the name asked for.
        resolution: the registry row and class, or None when the release does not register it.
        bases: the class's bases, each ``"Name (file:line)"`` for vLLM classes or its source text.
    """

    install: InstallInfo
    architecture: str
    resolution: Resolution | None
    bases: list[str]
    registry_file: str = ""
    suggestions: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    branches: list[dict] = field(default_factory=list)
    """Every platform branch (:func:`patchkit.vllm.registry.platforms.branches`): ``class``, ``location``, ``first``,
    ``eagle3`` (the class has ``SupportsEagle3`` in its bases and non-stub methods); empty without dispatch."""

    @property
    def own_model(self) -> bool:
        """True when the architecture resolves to a class of vLLM's own (a model file, not the Transformers
        backend); "native" is scan's word for EAGLE-3 support from vLLM's own code (issue 42, finding 10)."""
        return self.resolution is not None and self.resolution.cls is not None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        r = self.resolution
        cls = r.cls if r else None
        return {
            "command": "resolve",
            "install": vars(self.install),
            "architecture": self.architecture,
            "own_model": self.own_model,
            "registry": None
            if r is None
            else {
                "module": r.entry.module,
                "class": r.entry.class_name,
                "file": self.registry_file,
                "line": r.entry.lineno,
            },
            "file": cls.relpath if cls else None,
            "line": cls.lineno if cls else None,
            "class": cls.name if cls else None,
            "bases": self.bases,
            "aliases": list(r.aliases) if r else [],
            # not in the registry: vLLM would load it through its Transformers backend too
            "suggestions": self.suggestions,
            "alternatives": self.alternatives,
            "branches": self.branches,
            "transformers_backend": r is None or r.transformers_backend,
        }


def resolve(install: Install, architecture: str) -> ResolveReport:
    """Resolve an architecture name through this vLLM's registry, read statically.

    Returns:
        A :class:`ResolveReport`; ``resolution`` is None when the architecture is not registered
        (vLLM would then load it through its Transformers backend with ``trust_remote_code``).
    Raises:
        UsageError: ``architecture`` is empty or holds spaces (:func:`check_architecture`).
        SourceError: the registry or the model file does not parse.
    """
    check_architecture(architecture)
    tree = SourceTree(install.site_packages)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    resolution = registry.resolve(architecture)
    bases: list[str] = []
    if resolution is not None and resolution.cls is not None:
        for b in tree.bases(resolution.cls):
            bases.append(f"{b.name} ({b.location})" if isinstance(b, ClassRef) else b)
    # a case slip or a one-letter typo, not every vaguely similar name
    close = suggestions(registry, architecture) if resolution is None else []
    alternatives = tree.alternatives(resolution.entry.module, resolution.entry.class_name) if resolution else []

    branches = [
        {
            "class": b.dotted,
            "location": b.cls.location if b.cls else None,
            "first": b.first,
            "eagle3": links.has_interface(tree, registry, contract, b.cls),
        }
        for b in platforms.branches(tree, resolution)
    ]
    return ResolveReport(
        install_info(install, contract),
        architecture,
        resolution,
        bases,
        registry.relpath,
        close,
        alternatives,
        branches,
    )
