"""The attribute paths vLLM's runner and EAGLE proposer take through the target model, read from the release.

Nothing here is a per-release list: the paths are derived with :mod:`ast` from the release's own code.

- **Proposer.** ``EagleProposer`` in ``vllm/v1/spec_decode/eagle.py``; its ``load_model`` is found
  through the class's MRO (vLLM 0.10.2 - 0.18.0: in ``eagle.py``; 0.20 on: inherited from
  ``SpecDecodeBaseProposer`` in ``llm_base_proposer.py``). In ``load_model`` the name assigned from
  ``target_model.get_language_model()`` (``target_language_model``) is the language model; every
  read of it is followed, also into the proposer's own methods it is passed to
  (``_maybe_share_embeddings`` / ``_maybe_share_lm_head``, 0.16.0 on), and through local aliases
  (``inner_model = getattr(target_language_model, "model", None)``). Kept are the paths of what the
  proposer hands to the draft (the value of an assignment to ``self.model...``: ``lm_head``,
  ``model.embed_tokens``) and their prefixes (``model``). A read is *required* when it is a plain
  attribute read, or a ``getattr`` whose ``None`` result raises, or one arm of a ``hasattr`` chain that
  ends in ``raise``; it is *optional* when a ``hasattr`` guards it (absent: sharing silently skipped).
- **Image token.** Assignments ``self.model.config.image_token_index = target_model.config.<field>``
  in ``load_model``, under ``if`` tests naming target class names (0.15.1 on) or none (the fallback).
- **Aux ids.** Every call ``X.set_aux_hidden_state_layers(ids)`` under ``vllm/v1/worker`` (0.10.2 -
  0.16.0: ``gpu_model_runner.py``; 0.18.0 on also ``gpu/spec_decode/eagle/eagle3_utils.py`` or
  ``gpu/model_runner.py``): ``ids`` comes from ``X.<getter>()`` (``get_eagle3_aux_hidden_state_layers``
  to 0.17.1, ``get_eagle3_default_aux_hidden_state_layers`` from 0.18.0) or from a config reader.

Where the runner takes the aux ids from is read by :mod:`patchkit.vllm.runner.aux_reads` (which cuts the
setter's functions out of the runner's bytes); what a target class holds along each path by
:mod:`patchkit.vllm.class_attrs`; :func:`patchkit.vllm.chain.load_path.link_check` then follows each path
through one target class with :mod:`patchkit.vllm.composition` and returns one
:class:`~patchkit.results.Check` node per link.
"""

from __future__ import annotations

import ast
import dataclasses
import weakref
from dataclasses import dataclass

from patchkit.vllm.runner.aux_reads import AuxSource, aux_sources
from patchkit.vllm.source import ClassRef, SourceTree

PROPOSER_MODULE = "vllm.v1.spec_decode.eagle"
"""Module of vLLM's EAGLE proposer (all releases 0.10.2 - 0.33.0)."""
PROPOSER_CLASS = "EagleProposer"
LOADER = "load_model"
"""The proposer method that loads the draft and shares the target's modules with it."""
GETTER = "get_language_model"
"""``SupportsMultiModal`` method the proposer calls on a multimodal target."""
IMAGE_TOKEN_FIELD = "image_token_index"
"""The draft config field the proposer sets from the target's config."""
CONFIGS_PACKAGE = "vllm.transformers_utils.configs"
"""Package of vLLM's own Hugging Face config classes (a target's ``config`` class when vLLM ships it)."""
_DELEGATION_DEPTH = 3

Path = tuple[str, ...]


@dataclass(frozen=True)
class Read:
    """One path the proposer reads off the language model.

    Attributes:
        path: attribute names from the language model, e.g. ``("model", "embed_tokens")``.
        required: True when a missing attribute raises (``AttributeError`` or an explicit ``raise``).
        location: ``file:line`` of the first such read in the proposer.
        alternatives: other paths of the same ``hasattr ... elif hasattr ... else: raise`` chain
            (any one of them present is enough).
    """

    path: Path
    required: bool
    location: str
    alternatives: tuple[Path, ...] = ()


@dataclass(frozen=True)
class ImageTokenRead:
    """Which target config field the proposer copies into the draft's ``image_token_index``.

    Attributes:
        field: the path read off ``target_model`` (``("config", "media_placeholder_token_id")``).
        classes: the target class names this branch is for; empty for the fallback.
        location: ``file:line`` of the assignment.
    """

    field: Path
    classes: tuple[str, ...]
    location: str


@dataclass(frozen=True)
class Derivation:
    """Everything the runner and the proposer read through the target, in one release.

    Attributes:
        loader: ``file:line`` of the proposer's ``load_model`` (None: no proposer found).
        language_model: ``file:line`` of the ``get_language_model()`` call (None: never called).
        reads: the paths read off the language model.
        image_token: the image-token branches.
        aux: where the aux ids come from.
    """

    loader: str | None
    language_model: str | None
    reads: tuple[Read, ...]
    image_token: tuple[ImageTokenRead, ...]
    aux: tuple[AuxSource, ...]

    @property
    def empty(self) -> bool:
        """True when nothing at all was derived (the release's code was not understood)."""
        return not (self.reads or self.image_token or self.aux)


# -- reading the proposer -----------------------------------------------------------------------


def _chain(expr: ast.expr) -> tuple[str, Path] | None:
    """``a.b.c`` -> ``("a", ("b", "c"))``; None for anything that is not a plain dotted name."""
    attrs: list[str] = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id, tuple(reversed(attrs))
    return None


def const_str(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Reader:
    """Collects the reads of one language-model variable through a function and the methods it calls.

    ``aliases`` maps a local name to the paths (from the language model) it may hold: a name bound
    in two arms (``target_embed_tokens = inner_model.embed_tokens`` / ``... .embedding``) holds both.
    """

    def __init__(self, tree: SourceTree, owner: ClassRef) -> None:
        self.tree = tree
        self.owner = owner
        self.reads: dict[Path, dict] = {}
        self.shared: set[Path] = set()

    def _note(self, path: Path, required: bool, location: str, alternatives: tuple[Path, ...] = ()) -> None:
        entry = self.reads.setdefault(path, {"required": False, "location": location, "guarded": False,
                                             "alternatives": ()})
        if required and not entry["required"]:
            entry["required"], entry["location"] = True, location
        if alternatives:
            entry["alternatives"] = alternatives

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, relpath: str, aliases: dict[str, list[Path]],
                 depth: int = 0) -> None:
        where = lambda node: f"{relpath}:{node.lineno}"  # noqa: E731
        walked = tuple(ast.walk(fn))  # one walk serves every pass below
        guarded: set[Path] = set()
        none_raises: set[str] = set()
        for node in walked:  # `if x is None: raise ...`
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                    and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Is)
                    and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value is None
                    and any(isinstance(s, ast.Raise) for s in node.body)):
                none_raises.add(node.test.left.id)
        # aliases first, in source order: name = <alias path>.x / getattr(<alias path>, "x", default)
        for node in sorted((n for n in walked if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            for path, default in self._paths(node.value, aliases):
                if not path:
                    continue
                aliases.setdefault(name, [])
                if path not in aliases[name]:
                    aliases[name].append(path)
                if default:  # getattr with a default: guarded unless its None raises
                    self._note(path, name in none_raises, where(node))
                    if name not in none_raises:
                        guarded.add(path)
        # hasattr guards, and hasattr chains that end in raise
        for node in walked:
            if isinstance(node, ast.If):
                arms, cur = [], node
                while True:
                    ps = self._hasattr_paths(cur.test, aliases)
                    if not ps:
                        break
                    arms.extend((p, cur) for p in ps)
                    if len(cur.orelse) == 1 and isinstance(cur.orelse[0], ast.If):
                        cur = cur.orelse[0]
                        continue
                    if any(isinstance(s, ast.Raise) for s in cur.orelse):
                        paths = tuple(a[0] for a in arms)
                        for p2, at in arms:
                            self._note(p2, True, where(at), tuple(x for x in paths if x != p2))
                    break
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
                for p in self._hasattr_paths(node, aliases):
                    guarded.add(p)
                    self._note(p, False, where(node))
        # plain reads
        for node in walked:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                found = _chain(node)
                if found is None or found[0] not in aliases:
                    continue
                for base in aliases[found[0]]:
                    full = base + found[1]
                    for i in range(len(base) + 1, len(full) + 1):
                        self._note(full[:i], full[:i] not in guarded, where(node))
        # what is handed to the draft: <alias path> assigned to self.<...>
        for node in walked:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and (_chain(t) or ("",))[0] == "self" for t in node.targets):
                self.shared.update(p for p, _ in self._paths(node.value, aliases) if p)
        # delegation: self.method(<alias>, ...)
        if depth >= _DELEGATION_DEPTH:
            return
        for node in walked:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                continue
            passed = {i: aliases[a.id] for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id in aliases}
            if not passed:
                continue
            found = self.tree.find_member(self.owner, node.func.attr)
            if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [a.arg for a in found[1].args.args[1:]]
            inner = {params[i]: list(p) for i, p in passed.items() if i < len(params)}
            self.function(found[1], found[0].relpath, inner, depth + 1)

    def _paths(self, expr: ast.expr, aliases: dict[str, list[Path]]) -> list[tuple[Path, bool]]:
        """(path, has a default) for ``alias.x.y`` or ``getattr(alias..., "x", d)``; one per path of the alias."""
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr"
                and len(expr.args) == 3 and const_str(expr.args[1]) is not None):
            return [(p + (const_str(expr.args[1]),), True) for p, _ in self._paths(expr.args[0], aliases)]
        found = _chain(expr) if isinstance(expr, (ast.Attribute, ast.Name)) else None
        if found is None or found[0] not in aliases:
            return []
        return [(base + found[1], False) for base in aliases[found[0]]]

    def _hasattr_paths(self, test: ast.expr, aliases: dict[str, list[Path]]) -> list[Path]:
        if isinstance(test, ast.BoolOp):  # `share and hasattr(x, "lm_head")`
            return [p for v in test.values for p in self._hasattr_paths(v, aliases)]
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
                and len(test.args) == 2 and const_str(test.args[1]) is not None):
            return [p + (const_str(test.args[1]),) for p, _ in self._paths(test.args[0], aliases)]
        return []


def _proposer_loader(tree: SourceTree) -> tuple[ClassRef, ClassRef, ast.FunctionDef] | None:
    cls = tree.find_class(PROPOSER_MODULE, PROPOSER_CLASS)
    if cls is None:
        return None
    found = tree.find_member(cls, LOADER)
    if found is None or not isinstance(found[1], ast.FunctionDef):
        return None
    return cls, found[0], found[1]


def _image_token(fn: ast.FunctionDef, relpath: str) -> list[ImageTokenRead]:
    target_param = fn.args.args[1].arg if len(fn.args.args) > 1 else "target_model"
    out: list[ImageTokenRead] = []

    def names_in(test: ast.expr) -> tuple[str, ...]:
        found: list[str] = []
        for n in ast.walk(test):
            if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.In)):
                right = n.comparators[0]
                if const_str(right):
                    found.append(const_str(right))
                elif isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    found.extend(s for s in map(const_str, right.elts) if s)
        return tuple(found)

    def visit(stmts: list[ast.stmt], classes: tuple[str, ...]) -> None:
        for s in stmts:
            if isinstance(s, ast.If):
                visit(s.body, names_in(s.test) or classes)
                visit(s.orelse, classes)
            elif isinstance(s, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == IMAGE_TOKEN_FIELD for t in s.targets):
                found = _chain(s.value)
                if found is not None and found[0] == target_param:
                    out.append(ImageTokenRead(found[1], classes, f"{relpath}:{s.lineno}"))
            elif isinstance(s, (ast.With, ast.For, ast.Try)):
                visit(s.body, classes)

    visit(fn.body, ())
    return out


_DERIVED: "weakref.WeakKeyDictionary[SourceTree, Derivation]" = weakref.WeakKeyDictionary()


def derive(tree: SourceTree, with_aux: bool = True) -> Derivation:
    """Read the release's proposer and runner: the paths they take through the target (once per tree).

    Args:
        tree: the install's sources (patched or planned: overrides are read too).
        with_aux: also read the runners for where the aux ids come from (every file under
            ``vllm/v1/worker`` naming the setter); the proposer's reads alone need only the proposer.
    Returns:
        A :class:`Derivation` (empty fields when the code has no such read; see :attr:`Derivation.empty`;
        ``aux`` empty without ``with_aux``).
    Raises:
        SourceError: a proposer or runner module does not parse.
    """
    if tree in _DERIVED:
        return _DERIVED[tree]
    if tree not in _PROPOSER_ONLY:
        _PROPOSER_ONLY[tree] = _derive_proposer(tree)
    if not with_aux:
        return _PROPOSER_ONLY[tree]
    _DERIVED[tree] = dataclasses.replace(_PROPOSER_ONLY[tree], aux=tuple(aux_sources(tree)))
    return _DERIVED[tree]


_PROPOSER_ONLY: "weakref.WeakKeyDictionary[SourceTree, Derivation]" = weakref.WeakKeyDictionary()


def _derive_proposer(tree: SourceTree) -> Derivation:
    """The proposer's part of :func:`derive` (``aux`` left empty)."""
    found = _proposer_loader(tree)
    reads: tuple[Read, ...] = ()
    image: tuple[ImageTokenRead, ...] = ()
    loader = language_model = None
    if found is not None:
        proposer, owner, fn = found
        loader = f"{owner.relpath}:{fn.lineno}"
        image = tuple(_image_token(fn, owner.relpath))
        variables = [(t.id, n) for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name) and isinstance(n.value, ast.Call)
                     and any(isinstance(c, ast.Attribute) and c.attr == GETTER for c in ast.walk(n.value.func))]
        if variables:
            name, node = variables[0]
            language_model = f"{owner.relpath}:{node.lineno}"
            reader = _Reader(tree, proposer)
            reader.function(fn, owner.relpath, {name: [()]})
            keep = {p[:i] for p in reader.shared for i in range(1, len(p) + 1)}
            reads = tuple(Read(p, e["required"], e["location"], tuple(a for a in e["alternatives"] if a in keep))
                          for p, e in sorted(reader.reads.items(), key=lambda kv: (len(kv[0]), kv[0])) if p in keep)
    return Derivation(loader, language_model, reads, image, ())



__all__ = ["AuxSource", "Derivation", "ImageTokenRead", "Read", "derive"]
