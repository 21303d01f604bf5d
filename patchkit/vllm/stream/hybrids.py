"""Hybrid targets: does each mixer layer kind keep speculative decoding lossless on this release?

A hybrid (attention plus state-space or convolution mixers: LFM2, FalconH1, NemotronH, Qwen3-Next)
keeps a per-request state in every mixer layer. Under speculative decoding vLLM's target verifies
``1 + k`` tokens of a request in one step, and only some of them are accepted; a mixer is lossless
only if it steps its state by the accepted tokens alone. vLLM's mixer metadata carries the count
(``BaseMambaAttentionMetadata.num_accepted_tokens``, ``v1/attention/backends/mamba_attn.py``; the
GDN backend's own in ``gdn_attn.py``), and a mixer that handles speculation reads it and passes it to
its state update (``causal_conv1d_update(..., num_accepted_tokens=..., query_start_loc=...)``,
``selective_state_update(..., num_accepted_tokens=...)``). A mixer that never reads it runs the
``1 + k`` verified tokens of a request as ``1 + k`` separate one-token decodes, each reading the state
slot of another batch row: the verification logits and the stepped state are wrong, and greedy output
with speculation differs from greedy output without (docs/hybrids.md has the code, per release).

Facts (read from the release trees; file:line in docs/hybrids.md):
- hybrid: the class's MRO holds ``IsHybrid`` (``model_executor/models/interfaces.py``, 0.10.2 - 0.34.0).
- mixer layer: a class whose MRO holds ``MambaBase`` (``model_executor/layers/mamba/abstract.py``):
  ``ShortConv``, ``MambaMixer``, ``MambaMixer2``, the gated delta nets, the linear attentions.
- lossless: the mixer class (its vLLM MRO) or a function of its module reads ``.num_accepted_tokens``.
  ``ShortConv`` does not on 0.17.1 and 0.20.2 and does on 0.33.0 and 0.34.0; ``MambaMixer2`` and the
  gated delta nets of Qwen3-Next / Qwen3.5 do on all four; ``MambaMixer`` (Mamba-1) and the linear
  attentions never do.

:func:`read_hybrid` is the one place these facts are read; scan, verify, doctor, apply and rehearse
ask it. Nothing here imports vLLM.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.vllm.release.source import ClassRef, SourceTree

HYBRID_PROTOCOL = "IsHybrid"
"""vLLM's marker protocol of a hybrid model class (``model_executor/models/interfaces.py``)."""
MIXER_BASE = "MambaBase"
"""The base of every stateful mixer layer (``model_executor/layers/mamba/abstract.py``)."""
ACCEPTED = "num_accepted_tokens"
"""The mixer metadata field a speculation-aware mixer reads (``v1/attention/backends/mamba_attn.py``)."""
STATE_UPDATES = ("causal_conv1d_update", "selective_state_update", "fused_recurrent", "update")
"""Callee names that step a mixer's decode state (the evidence shown where ``ACCEPTED`` is not read)."""
_MODEL_PACKAGES = ("vllm.model_executor.models.", "vllm.models.")
"""Packages whose classes compose a model (followed from the architecture's class to its mixers)."""
_MAX_CLASSES = 400
"""A bound on the classes followed from one architecture (a model file holds tens)."""


@dataclass(frozen=True)
class MixerReading:
    """One mixer layer kind of a hybrid.

    Attributes:
        kind: the mixer class's name (``ShortConv``).
        location: ``file:line`` of its ``class`` statement.
        lossless: True when it reads :data:`ACCEPTED`, False when it does not.
        evidence: ``file:line`` of the read, or of the state update that steps without it.
    """

    kind: str
    location: str
    lossless: bool
    evidence: str

    def describe(self) -> str:
        if self.lossless:
            return f"{self.kind} steps its state by the accepted tokens only (reads {ACCEPTED}, {self.evidence})"
        return (
            f"{self.kind} never reads {ACCEPTED}: it runs each verified token as a decode of its own and "
            "keeps no accepted count, rejected draft tokens included"
        )


@dataclass(frozen=True)
class HybridReading:
    """Whether an architecture's class is a hybrid and what its mixers do with rejected draft tokens.

    Attributes:
        architecture: the class name read.
        hybrid: the class declares :data:`HYBRID_PROTOCOL`.
        mixers: one :class:`MixerReading` per mixer layer kind reached from the class.
        location: ``file:line`` of the architecture's class.
        missing: for a hybrid whose mixers patchkit cannot find, what it looked for and where.
    """

    architecture: str
    hybrid: bool
    mixers: tuple[MixerReading, ...] = ()
    location: str | None = None
    missing: str | None = None

    @property
    def lossless(self) -> bool | None:
        """True: not a hybrid, or every mixer steps by the accepted tokens; False: one does not;
        None: a hybrid whose mixers patchkit could not read (not checked; callers fail closed)."""
        if not self.hybrid:
            return True
        if any(not m.lossless for m in self.mixers):
            return False
        return True if self.mixers and self.missing is None else None

    @property
    def lossy(self) -> tuple[MixerReading, ...]:
        return tuple(m for m in self.mixers if not m.lossless)

    def verdict(self) -> str:
        """One line: ``lossless: ...``, ``not lossless: <kind> (<file:line>)`` or ``not checked: ...``."""
        if not self.hybrid:
            return "not a hybrid"
        if self.lossless is False:
            return "not lossless: " + "; ".join(f"{m.kind} ({m.evidence})" for m in self.lossy)
        if self.lossless is None:
            return f"not checked: {self.missing}"
        return "lossless: " + "; ".join(f"{m.kind} reads {ACCEPTED} ({m.evidence})" for m in self.mixers)

    def explain(self) -> str:
        """The verdict with what it means for a user serving the model."""
        if self.lossless is False:
            return (
                "; ".join(m.describe() for m in self.lossy)
                + "; greedy output with speculation differs from greedy output without it"
            )
        if self.lossless is None:
            return (
                f"patchkit cannot tell whether speculation keeps {self.architecture}'s output unchanged "
                f"({self.missing})"
            )
        return "; ".join(m.describe() for m in self.mixers)


def read_hybrid(tree: SourceTree, cls: ClassRef) -> HybridReading:
    """Read whether ``cls`` (an architecture's class) is a hybrid and, per mixer layer kind it builds,
    whether that mixer steps its state by the accepted draft tokens only.

    Mixers are found by following, from ``cls``, the vLLM classes each class of a model package
    names (its body, and module-level names it uses: a dict of layer classes), up to
    :data:`_MAX_CLASSES` classes; a class whose MRO holds :data:`MIXER_BASE` is a mixer (not followed).

    Returns:
        A :class:`HybridReading` (``hybrid`` False: nothing else read).
    Raises:
        SourceError: a file on the way does not parse.
    """
    if not any(c.name == HYBRID_PROTOCOL for c in tree.mro(cls)) and not _declares_hybrid(tree, cls):
        return HybridReading(cls.name, False, location=cls.location)
    mixers: dict[str, MixerReading] = {}
    seen: set[ClassRef] = set()
    todo = [cls]
    while todo and len(seen) < _MAX_CLASSES:
        ref = todo.pop(0)
        if ref in seen:
            continue
        seen.add(ref)
        if _is_mixer(tree, ref):
            mixers.setdefault(ref.name, _read_mixer(tree, ref))
            continue
        for owner in tree.mro(ref):
            if not owner.module.startswith(_MODEL_PACKAGES):
                continue
            for found in _named_classes(tree, owner):
                if found not in seen and (found.module.startswith(_MODEL_PACKAGES) or _is_mixer(tree, found)):
                    todo.append(found)
    if not mixers:
        return HybridReading(
            cls.name,
            True,
            (),
            cls.location,
            f"{cls.name} declares {HYBRID_PROTOCOL}, but no class subclassing {MIXER_BASE} was found "
            f"from {cls.location} through the classes its model files name",
        )
    return HybridReading(cls.name, True, tuple(sorted(mixers.values(), key=lambda m: m.kind)), cls.location)


def _declares_hybrid(tree: SourceTree, cls: ClassRef) -> bool:
    """``is_hybrid = True`` in the class body of ``cls`` or a vLLM base (a class without the protocol)."""
    for owner in tree.mro(cls):
        for stmt in tree.class_node(owner).body:
            if (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and isinstance(getattr(stmt, "value", None), ast.Constant)
                and stmt.value.value is True
                and any(
                    isinstance(t, ast.Name) and t.id == "is_hybrid"
                    for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                )
            ):
                return True
    return False


def _is_mixer(tree: SourceTree, ref: ClassRef) -> bool:
    return any(c.name == MIXER_BASE for c in tree.mro(ref)) and ref.name != MIXER_BASE


def _named_classes(tree: SourceTree, ref: ClassRef) -> list[ClassRef]:
    """vLLM classes a class body names, and those named by the module-level assignments it uses."""
    module_tree = tree.module_tree(ref.module)
    assigned = {
        t.id: stmt.value
        for stmt in module_tree.body
        if isinstance(stmt, ast.Assign)
        for t in stmt.targets
        if isinstance(t, ast.Name)
    }
    out: list[ClassRef] = []
    exprs: list[ast.expr] = []
    for node in ast.walk(tree.class_node(ref)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            exprs.append(node)
            if node.id in assigned:
                exprs.extend(n for n in ast.walk(assigned[node.id]) if isinstance(n, (ast.Name, ast.Attribute)))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            exprs.append(node)
    for expr in exprs:
        found = tree.resolve_expr(ref.module, expr)
        if isinstance(found, ClassRef) and found not in out:
            out.append(found)
    return out


def _read_mixer(tree: SourceTree, mixer: ClassRef) -> MixerReading:
    """Whether ``mixer`` (its vLLM MRO, and the functions of each defining module) reads :data:`ACCEPTED`."""
    update = None
    for owner in tree.mro(mixer):
        if owner.name == MIXER_BASE:
            continue
        scopes: list[ast.AST] = [tree.class_node(owner)]
        scopes += [
            s for s in tree.module_tree(owner.module).body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for scope in scopes:
            for node in ast.walk(scope):
                if isinstance(node, ast.Attribute) and node.attr == ACCEPTED:
                    return MixerReading(mixer.name, mixer.location, True, f"{owner.relpath}:{node.lineno}")
        if update is None:
            for node in ast.walk(tree.class_node(owner)):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if any(u in name for u in STATE_UPDATES):
                        update = f"{owner.relpath}:{node.lineno}"
                        break
    return MixerReading(mixer.name, mixer.location, False, update or mixer.location)


HYBRID_CHECK = "hybrid-mixers-lossless"
"""The ``kind`` of verify's per-architecture check node that says :meth:`HybridReading.verdict`
(``apply``'s chain gate does not veto on it: the selection refused the hybrid already, or ``--force``
accepted it)."""


def read_architecture(tree: SourceTree, registry, architecture: str, inner: str | None = None) -> HybridReading | None:
    """:func:`read_hybrid` of a registry architecture's class; for a wrapper (a multimodal class that
    builds its language model from the config) whose own mixers cannot be found, the language model's
    (``inner``: :attr:`patchkit.vllm.shapes.classify.ArchShape.inner`). None when the registry has no class for it."""
    resolution = registry.resolve(architecture)
    if resolution is None or resolution.cls is None:
        return None
    reading = read_hybrid(tree, resolution.cls)
    if reading.hybrid and not reading.mixers and inner and inner != architecture:
        held = registry.resolve(inner)
        if held is not None and held.cls is not None:
            found = read_hybrid(tree, held.cls)
            if found.mixers:
                return HybridReading(reading.architecture, True, found.mixers, reading.location, found.missing)
    return reading


def refusal(reading: HybridReading) -> str:
    """``apply``'s refusal of a hybrid that is not lossless (or not checked) on this release."""
    return (
        f"{reading.verdict()}: {reading.explain()}; patchkit writes no EAGLE-3 patch that changes what the model "
        "says (pass --force to patch it anyway, accepting that output)"
    )


def accepted(reading: HybridReading) -> str:
    """What a user accepts by patching a hybrid that is not lossless with ``--force``."""
    return (
        f"accepted with --force: {reading.verdict()}; served with speculation, greedy output will differ "
        "from greedy output without it ('patchkit rehearse' shows where)"
    )


__all__ = ["HYBRID_CHECK", "HybridReading", "MixerReading", "accepted", "read_architecture", "read_hybrid", "refusal"]
