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

:func:`link_check` then follows each path through one target class with
:mod:`patchkit.vllm.composition` and returns one :class:`~patchkit.results.Check` node per link.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import weakref
from dataclasses import dataclass

from patchkit.vllm import composition
from patchkit.vllm.contract import SETTER, is_multimodal, is_stub
from patchkit.vllm.registry import Registry
from patchkit.results import Check
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
WORKER_PACKAGE = "vllm/v1/worker"
"""Folder of vLLM's model runners (where the aux ids are set on the target)."""
_DELEGATION_DEPTH = 3
LABEL = "load path (runner and proposer)"
"""Start of the label of :func:`link_check`'s node (the class name follows: one node per class)."""

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
class AuxSource:
    """Where the runner takes the aux-state layer ids from before calling the setter.

    Attributes:
        kind: ``"target"`` (a getter called on the model the setter is called on) or ``"config"``.
        name: the getter's or reader's name.
        location: ``file:line`` of the call.
    """

    kind: str
    name: str
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


def _const_str(node: ast.expr) -> str | None:
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
                and len(expr.args) == 3 and _const_str(expr.args[1]) is not None):
            return [(p + (_const_str(expr.args[1]),), True) for p, _ in self._paths(expr.args[0], aliases)]
        found = _chain(expr) if isinstance(expr, (ast.Attribute, ast.Name)) else None
        if found is None or found[0] not in aliases:
            return []
        return [(base + found[1], False) for base in aliases[found[0]]]

    def _hasattr_paths(self, test: ast.expr, aliases: dict[str, list[Path]]) -> list[Path]:
        if isinstance(test, ast.BoolOp):  # `share and hasattr(x, "lm_head")`
            return [p for v in test.values for p in self._hasattr_paths(v, aliases)]
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
                and len(test.args) == 2 and _const_str(test.args[1]) is not None):
            return [p + (_const_str(test.args[1]),) for p, _ in self._paths(test.args[0], aliases)]
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
                if _const_str(right):
                    found.append(_const_str(right))
                elif isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    found.extend(s for s in map(_const_str, right.elts) if s)
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


def _aux_sources(tree: SourceTree) -> list[AuxSource]:
    root = tree.site_packages / WORKER_PACKAGE
    out: list[AuxSource] = []
    for dirpath, _, files in sorted(os.walk(root)):
        for fname in sorted(files):
            if not fname.endswith(".py"):
                continue
            relpath = os.path.relpath(os.path.join(dirpath, fname), tree.site_packages).replace(os.sep, "/")
            source = tree.read_bytes(relpath)
            if SETTER.encode() not in source:
                continue
            key = (relpath, source)
            if key not in _AUX_BY_FILE:
                _AUX_BY_FILE[key] = _aux_in_file(source, relpath)
            for found in _AUX_BY_FILE[key]:
                if found not in out:
                    out.append(found)
    return out


_AUX_BY_FILE: dict[tuple[str, bytes], tuple[AuxSource, ...]] = {}
"""The aux sources of one runner file, by its path and bytes (a run reads the same runner in several views)."""


def _aux_in_file(source: bytes, relpath: str) -> tuple[AuxSource, ...]:
    """The aux sources of one runner file: each ``X.set_aux_hidden_state_layers(ids)`` call and where
    ``ids`` comes from (a call, or the calls assigned to that name in the enclosing function).

    Only the functions that hold the calls are parsed (:func:`_setter_functions`; the runner,
    ``gpu_model_runner.py``, is 0.28 MB and one method of it holds the call), or the whole file
    when they cannot be cut out exactly. Both give the same result.
    """
    functions = _setter_functions(source)
    if functions is not None:
        roots: list[ast.AST] = list(functions)
    else:
        try:
            roots = [ast.parse(source)]
        except (SyntaxError, ValueError):
            return ()
    return _aux_in_trees(roots, relpath)


def _setter_lines(source: bytes) -> list[int]:
    """0-based indexes of the lines naming the setter, comment lines left out (a line whose first
    character is ``#`` is a comment or inside a string: never a call)."""
    needle = SETTER.encode()
    out: list[int] = []
    at = source.find(needle)
    while at != -1:
        start = source.rfind(b"\n", 0, at) + 1
        if not source[start:at].lstrip(b" ").startswith(b"#"):
            out.append(source.count(b"\n", 0, at))
        stop = source.find(b"\n", at)
        at = -1 if stop == -1 else source.find(needle, stop)
    return out


def _indent(line: bytes) -> int | None:
    """Columns of leading spaces; None for a line that neither opens nor closes a block: blank,
    comment-only, or starting with a closing bracket (the end of a statement begun above, such as a
    signature's ``) -> None:``)."""
    body = line.lstrip(b" ")
    return None if not body.strip() or body.startswith((b"#", b")", b"]", b"}")) else len(line) - len(body)


def _setter_functions(source: bytes) -> list[ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The outermost functions holding the setter's calls, each parsed from its own lines; None when
    that cannot be done exactly (the caller then parses the whole file).

    A line's block is opened by the nearest line above it that is indented less; going up so
    reaches the outermost ``def`` around a call, whose body ends at the next line indented as
    little as its ``def``. That text reading can be fooled by continuation lines and strings, so
    each cut is accepted only if it parses alone (parsed at its own line numbers, inside ``if 1:``
    when indented) as one function whose body has a call of the setter on the line the text named.
    Files with tabs, form feeds or an encoding declaration, and a call outside any function, are
    parsed whole.
    """
    head = b"\n".join(source.split(b"\n", 2)[:2])
    if b"\t" in source or b"\x0c" in source or b"coding" in head or source.startswith(b"\xef\xbb\xbf"):
        return None
    wanted = _setter_lines(source)
    if not wanted:
        return []
    lines = source.split(b"\n")
    cuts: dict[int, int] = {}  # first line index of an outermost def -> index past its last line
    for i in wanted:
        if i in cuts or any(start < i < end for start, end in cuts.items()):
            continue
        threshold, outer = _indent(lines[i]), None
        if threshold is None:
            return None
        for j in range(i - 1, -1, -1):
            ind = _indent(lines[j])
            if ind is None or ind >= threshold:
                continue
            threshold = ind
            if lines[j].lstrip(b" ").startswith((b"def ", b"async def ")):
                outer = j
            if ind == 0:
                break
        if outer is None:
            return None
        depth = _indent(lines[outer])
        end = next((k for k in range(outer + 1, len(lines)) if (ind := _indent(lines[k])) is not None and ind <= depth),
                   len(lines))
        if end <= i:
            return None
        cuts[outer] = end
    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for start, end in sorted(cuts.items()):
        # parsed at its own line numbers: blank lines first, then (for a method) an `if 1:` to hold it
        opener = b"\n" * start if not _indent(lines[start]) else b"\n" * (start - 1) + b"if 1:\n"
        text = opener + b"\n".join(lines[start:end])
        try:
            body = ast.parse(text).body
        except (SyntaxError, ValueError):
            return None
        fn = body[0].body[0] if len(body) == 1 and isinstance(body[0], ast.If) and len(body[0].body) == 1 else \
            body[0] if len(body) == 1 else None
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.lineno != start + 1:
            return None
        out.append(fn)
    found = {n.func.end_lineno - 1 for fn in out for n in ast.walk(fn)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == SETTER}
    return out if found >= set(wanted) else None


def _aux_in_trees(roots: list[ast.AST], relpath: str) -> tuple[AuxSource, ...]:
    """:func:`_aux_in_file` on parsed code: a whole module, or the functions that hold the calls."""
    out: list[AuxSource] = []
    calls: list[tuple[ast.Call, ast.AST]] = []  # each setter call with its innermost enclosing function
    stack: list[tuple[ast.AST, ast.AST | None]] = [(root, None) for root in roots]
    while stack:
        node, fn = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == SETTER
                and len(node.args) == 1 and isinstance(node.args[0], (ast.Name, ast.Call)) and fn is not None):
            calls.append((node, fn))
        stack.extend((child, fn) for child in ast.iter_child_nodes(node))
    for call, fn in sorted(calls, key=lambda c: c[0].lineno):
        receiver = ast.unparse(call.func.value)
        arg = call.args[0]
        made = [(arg, call.lineno)] if isinstance(arg, ast.Call) else [
            (a.value, a.lineno) for a in ast.walk(fn)
            if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)
            and any(isinstance(t, ast.Name) and t.id == arg.id for t in a.targets)]
        for value, lineno in made:
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name is None:
                continue
            on_target = isinstance(func, ast.Attribute) and ast.unparse(func.value) == receiver
            found = AuxSource("target" if on_target else "config", name, f"{relpath}:{lineno}")
            if found not in out:
                out.append(found)
    return tuple(out)


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
    _DERIVED[tree] = dataclasses.replace(_PROPOSER_ONLY[tree], aux=tuple(_aux_sources(tree)))
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


# -- following the paths through one class --------------------------------------------------------


def assigned_at(tree: SourceTree, cls: ClassRef, attr: str) -> str | None:
    """``file:line`` where ``cls`` (or a class in its MRO) gets ``attr``: ``self.attr = ...`` in an
    ``__init__``, or a class-level definition; None when nothing does."""
    for owner in tree.mro(cls):
        init = tree.method(owner, "__init__")
        if init is not None:
            for node in ast.walk(init):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
                if any(composition.self_attr(t) == attr for t in targets):
                    return f"{owner.relpath}:{node.lineno}"
    found = tree.find_member(cls, attr)
    return f"{found[0].relpath}:{found[1].lineno}" if found is not None else None


def language_model_attr(tree: SourceTree, cls: ClassRef) -> tuple[str, str] | None:
    """``(attr, file:line)``: the ``self.<attr>`` that ``cls.get_language_model()`` returns.

    Two forms are read:

    - a getter that is exactly ``return self.<attr>`` (vLLM 0.10.2 - 0.15.1 wrappers);
    - the generic getter of ``SupportsMultiModal`` (vLLM 0.16.0 on, ``interfaces.py``), which walks
      the common prefix of ``self._language_model_names``: the attributes the methods that set that
      list (``_mark_language_model``) record. The language model is then what ``cls.__init__``
      assigns inside ``with self._mark_language_model(...):``.

    Returns None when neither form is found, or the form names more than one attribute.
    """
    found = tree.find_member(cls, GETTER)
    if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    owner, getter = found
    body = [s for s in getter.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        attr = composition.self_attr(body[0].value)
        return (attr, f"{owner.relpath}:{body[0].lineno}") if attr else None
    markers = _markers(tree, owner, getter)
    if not markers:
        return None
    held: dict[str, str] = {}
    for c in tree.mro(cls):
        init = tree.method(c, "__init__")
        for node in ast.walk(init) if init is not None else ():
            if isinstance(node, ast.With) and any(
                    isinstance(i.context_expr, ast.Call) and composition.self_attr(i.context_expr.func) in markers
                    for i in node.items):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Assign):
                        for t in sub.targets:
                            if composition.self_attr(t):
                                held.setdefault(composition.self_attr(t), f"{c.relpath}:{sub.lineno}")
        if held:
            break
    if not held and any(isinstance(n, ast.Attribute) and n.attr == "children" for n in ast.walk(getter)):
        return _first_language_model_child(tree, cls)
    return next(iter(held.items())) if len(held) == 1 else None


def _markers(tree: SourceTree, owner: ClassRef, getter: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The methods of ``owner`` that assign an attribute its ``get_language_model`` (``getter``) reads
    (``_mark_language_model``); once per class and tree (every multimodal wrapper of a release shares
    ``SupportsMultiModal``'s, and finding them walks each of its methods)."""
    known = _MARKERS.setdefault(tree, {})
    if owner not in known:
        read = {composition.self_attr(n) for n in ast.walk(getter) if isinstance(n, ast.Attribute)} - {None}
        known[owner] = frozenset(
            stmt.name for stmt in tree.class_node(owner).body if isinstance(stmt, ast.FunctionDef)
            and any(isinstance(n, ast.Assign) and any(composition.self_attr(t) in read for t in n.targets)
                    for n in ast.walk(stmt)))
    return known[owner]


_MARKERS: "weakref.WeakKeyDictionary[SourceTree, dict[ClassRef, frozenset[str]]]" = weakref.WeakKeyDictionary()


def _first_language_model_child(tree: SourceTree, cls: ClassRef) -> tuple[str, str] | None:
    """The generic getter's fallback (vLLM 0.33.0 ``interfaces.py``): with nothing marked, the first
    child module that has ``embed_input_ids`` (0.33.0 ``diffusion_gemma.py``: ``self.model``, a bare
    ``Gemma4Model``). Children come in the order ``__init__`` assigns them; only vLLM classes built
    by a direct call are followed (an external class, or None, is skipped as vLLM would skip it
    when it lacks ``embed_input_ids``)."""
    for c in tree.mro(cls):
        init = tree.method(c, "__init__")
        if init is None:
            continue
        for node in composition.statements(init):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            attr = next((composition.self_attr(t) for t in node.targets if composition.self_attr(t)), None)
            held = tree.resolve_expr(c.module, node.value.func) if attr else None
            if isinstance(held, ClassRef) and tree.find_member(held, "embed_input_ids") is not None:
                return attr, f"{c.relpath}:{node.lineno}"
        return None
    return None


def _follow(tree: SourceTree, registry: Registry, root: ClassRef, read: Read, label_root: str) -> list[Check]:
    """One node per link of ``read.path`` starting at ``root``."""
    out: list[Check] = []
    cls: ClassRef | None = root
    for i, attr in enumerate(read.path):
        label = f"proposer reads {label_root}.{'.'.join(read.path[:i + 1])}"
        if cls is None:
            out.append(Check(label, None, "not followed: the class before it is not one vLLM class", read.location))
            break
        at = assigned_at(tree, cls, attr)
        if at is None:
            alts = [a for a in read.alternatives if a[:i] == read.path[:i] and cls is not None
                    and assigned_at(tree, cls, a[i]) is not None]
            if alts:
                out.append(Check(label, True, f"{cls.name} has {'.'.join(alts[0])} instead ({cls.location})",
                                 read.location))
                break
            if read.required:
                out.append(Check(label, False, f"{cls.name} ({cls.location}) has no {attr}: AttributeError when any "
                                               "draft loads", read.location))
            else:
                out.append(Check(label, None, f"{cls.name} ({cls.location}) has no {attr}: the read is hasattr-guarded, "
                                              "so the proposer skips sharing it without a word", read.location))
            break
        out.append(Check(label, True, f"{cls.name}: {at}" + ("" if read.required else " (hasattr-guarded)"), read.location))
        try:
            cls = composition.held_class(tree, registry, cls, attr).cls
        except composition.CompositionError:
            cls = None
    return out


def link_check(tree: SourceTree, registry: Registry, cls: ClassRef, derivation: Derivation | None = None) -> Check:
    """The runner's and proposer's paths through ``cls``, one child per link, each with ``file:line``.

    Args:
        tree, registry: the install's sources and registry.
        cls: the target class (a registry architecture's class).
        derivation: :func:`derive` of ``tree`` (computed when None).
    Returns:
        A :class:`Check` ``"load path (runner and proposer) for <class>"`` (:data:`LABEL`); it fails when a link is broken: a
        required read of an attribute the class does not have (a ``hasattr``-guarded one that is
        absent is shown, not failed: the proposer skips that sharing), a missing aux-id getter, or an image-token field the target's config class lacks.
        It also fails when nothing could be derived from the release (so it never passes silently).
    Raises:
        SourceError: a file on the way does not parse.
    """
    d = derivation if derivation is not None else derive(tree)
    node = Check(f"{LABEL} for {cls.name}", True, "", d.loader)
    if d.empty:
        node.ok, node.detail = False, "patchkit found no path the runner or the proposer takes through the target"
        return node
    for source in d.aux:
        if source.kind == "target":
            found = tree.find_member(cls, source.name)
            ok = found is not None and isinstance(found[1], ast.FunctionDef) and not is_stub(found[1])
            detail = (f"{found[0].name}.{source.name}: {found[0].relpath}:{found[1].lineno}" if ok else
                      f"{cls.name} has no {source.name}()" if found is None else f"{found[0].name}.{source.name} is a stub")
            node.children.append(Check(f"runner takes aux ids from {source.name}()", ok, detail, source.location))
        else:
            node.children.append(Check(f"runner takes aux ids from {source.name}() first", None,
                                       "the draft's config, when it names ids", source.location))
    multimodal = is_multimodal(tree, cls)
    root: ClassRef | None = cls
    label_root = cls.name
    if multimodal and d.language_model is not None:
        held = language_model_attr(tree, cls)
        label = f"proposer calls {cls.name}.{GETTER}()"
        if held is None:
            node.children.append(Check(label, None, "what it returns is not read statically; its paths are not followed",
                                       d.language_model))
            root = None
        else:
            attr, at = held
            try:
                root = composition.held_class(tree, registry, cls, attr).cls
                node.children.append(Check(label, True, f"returns self.{attr} ({at}): {root.name} ({root.location})",
                                           d.language_model))
                label_root = f"{GETTER}()"
            except composition.CompositionError as exc:
                node.children.append(Check(label, None, f"returns self.{attr} ({at}); {exc}", d.language_model))
                root = None
    if root is not None:
        seen: set[str] = set()
        for read in d.reads:
            links = _follow(tree, registry, root, read, label_root)
            for link in links:
                if link.label not in seen:
                    seen.add(link.label)
                    node.children.append(link)
    if multimodal:
        node.children.append(_image_token_check(tree, cls, d))
    node.ok = not any(c.failures() for c in node.children)
    if not node.ok:
        node.detail = "broken: " + "; ".join(c.label for c in node.failures())
    return node


def _image_token_check(tree: SourceTree, cls: ClassRef, d: Derivation) -> Check:
    branch = next((b for b in d.image_token if cls.name in b.classes), None)
    fallback = next((b for b in d.image_token if not b.classes), None)
    if branch is not None:
        return Check(f"proposer reads target config.{'.'.join(branch.field[1:])}", True,
                     f"a branch for {cls.name}", branch.location)
    if fallback is None:
        return Check("proposer reads the image token", None, "no image-token assignment found in load_model", d.loader)
    field = fallback.field[-1]
    label = f"proposer reads target config.{'.'.join(fallback.field[1:])}"
    config = _config_class(tree, cls)
    if config is None:
        return Check(label, None, f"no branch for {cls.name}; its config class is not a vLLM class (not checked)",
                     fallback.location)
    at = assigned_at(tree, config, field)
    if at is not None:
        return Check(label, True, f"{config.name}: {at}", fallback.location)
    return Check(label, False, f"no branch for {cls.name}, and {config.name} ({config.location}) has no {field}: "
                               "AttributeError when any draft loads", fallback.location)


def _config_class(tree: SourceTree, cls: ClassRef) -> ClassRef | None:
    """The vLLM config class ``cls``'s module imports from ``vllm.transformers_utils.configs`` (exactly one).

    That package re-exports its classes lazily from vLLM 0.16.0 (``_CLASS_TO_MODULE = {"KimiK25Config":
    "vllm.transformers_utils.configs.kimi_k25", ...}`` read by a module ``__getattr__``): a name the
    import does not resolve is looked up in such a module-level ``{name: module}`` dict literal.
    """
    module = tree.module_tree(cls.module)
    found: set[ClassRef] = set()
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(CONFIGS_PACKAGE):
            for alias in node.names:
                ref = tree.find_class(cls.module, alias.asname or alias.name) or _lazy_export(tree, node.module, alias.name)
                if ref is not None and ref.module.startswith(CONFIGS_PACKAGE):
                    found.add(ref)
    return found.pop() if len(found) == 1 else None


def _lazy_export(tree: SourceTree, package: str, name: str) -> ClassRef | None:
    if not tree.has_module(package):
        return None
    for node in tree.module_tree(package).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                if k is not None and _const_str(k) == name and _const_str(v):
                    return tree.find_class(_const_str(v), name)
    return None


__all__ = ["AuxSource", "Derivation", "ImageTokenRead", "Read", "derive", "language_model_attr",
           "assigned_at", "link_check"]
