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

- **V2** (:data:`patchkit.vllm.runner.generations.V2`): the same reading of the module-level
  ``load_eagle_model`` in ``vllm/v1/worker/gpu/spec_decode/eagle/utils.py``, where the language model is
  ``target_model.get_language_model() if hasattr(...) else target_model``; the calls it passes the
  language model (or a path off it) to are followed into the module's own functions
  (``maybe_share_target_embed``, ``get_target_lm_head``, 0.34.0), a ``getattr(a, "x", None) or
  getattr(a, "y", None)`` holds both paths, and what is handed to the draft is the value of an assignment
  to any attribute not of the language model (``draft_inner.embed_tokens = ...``). 0.20.2:
  ``inner_model = getattr(target_language_model, "model", None)`` (guarded); 0.34.0:
  ``target_inner = target_language_model.model`` (required: ``AttributeError`` when absent), and in
  ``maybe_share_target_embed`` ``target_embed = getattr(target_inner, "embed_tokens", None) or
  getattr(target_inner, "embedding", None)`` with a ``raise`` nested under ``if target_embed is None:``
  (a draft without its own embedding): required, either alternative enough, located at the ``raise``.

Which of the two is followed is :func:`patchkit.vllm.runner.serving.serving_runner`'s choice; a
:class:`Derivation` names it (``runner``), and says "not checked" (``not_checked``) when the install
lacks the chosen runner's loader or aux-id setter.

Where the runner takes the aux ids from is read by :mod:`patchkit.vllm.runner.aux_reads` (which cuts the
setter's functions out of the runner's bytes); what a target class holds along each path by
:mod:`patchkit.vllm.classes.class_attrs`; :func:`patchkit.vllm.chain.load_path.link_check` then follows each path
through one target class with :mod:`patchkit.vllm.classes.composition` and returns one
:class:`~patchkit.results.Check` node per link.
"""

from __future__ import annotations

import ast
import dataclasses
import weakref
from dataclasses import dataclass

from patchkit.vllm.runner.aux_reads import AuxSource, aux_sources
from patchkit.vllm.runner.generations import V1, V2, Generation
from patchkit.vllm.runner.serving import RunnerChoice, serving_runner
from patchkit.vllm.release.source import ClassRef, SourceTree

PROPOSER_MODULE = V1.loader_module
"""Module of vLLM's EAGLE proposer (V1; declared in :mod:`patchkit.vllm.runner.generations`)."""
PROPOSER_CLASS = V1.loader_class
LOADER = V1.loader
"""The proposer method that loads the draft and shares the target's modules with it (V1)."""
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
        runner: the runner generation followed (``"V1"``, ``"V2"``, ``"none"``).
        runner_reason: why that one, one line (:attr:`patchkit.vllm.runner.serving.RunnerChoice.reason`).
        not_checked: ``"not checked: <what is missing, where patchkit looked>"`` when the install lacks
            a runner fact the derivation rests on (None: every one was found).
        reader: the word for the loader in check labels (``"proposer"`` V1, ``"speculator"`` V2).
    """

    loader: str | None
    language_model: str | None
    reads: tuple[Read, ...]
    image_token: tuple[ImageTokenRead, ...]
    aux: tuple[AuxSource, ...]
    runner: str = "V1"
    runner_reason: str = ""
    not_checked: str | None = None
    reader: str = "proposer"

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


def _walk_body(stmts: list[ast.stmt]):
    """Every node under ``stmts``, not entering nested function or class definitions."""
    todo = list(stmts)
    while todo:
        node = todo.pop(0)
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


class _Reader:
    """Collects the reads of one language-model variable through a function and the methods it calls.

    ``aliases`` maps a local name to the paths (from the language model) it may hold: a name bound
    in two arms (``target_embed_tokens = inner_model.embed_tokens`` / ``... .embedding``) holds both.
    """

    def __init__(self, tree: SourceTree, owner: ClassRef | None, module: str | None = None) -> None:
        self.tree = tree
        self.owner = owner  # the proposer class (V1); None for a module-level loader (V2)
        self.module = module  # the loader's module (V2: its module-level functions are followed)
        self.reads: dict[Path, dict] = {}
        self.shared: set[Path] = set()

    def _handed(self, target: ast.expr, aliases: dict[str, list[Path]]) -> bool:
        """Whether an assignment to ``target`` hands its value to the draft: ``self.<...>`` in the
        proposer (V1), any attribute of a name that is not a language-model alias in a function (V2)."""
        if not isinstance(target, ast.Attribute):
            return False
        base = (_chain(target) or ("",))[0]
        return base == "self" if self.owner is not None else bool(base) and base not in aliases

    @staticmethod
    def _isinstance_test(test: ast.expr, aliases: dict[str, list[Path]]) -> bool:
        return (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                and bool(test.args) and isinstance(test.args[0], ast.Name))

    def _module_function(self, name: str) -> ast.FunctionDef | None:
        if self.module is None:
            return None
        try:
            body = self.tree.module_tree(self.module).body
        except Exception:  # noqa: BLE001 - a module that does not parse offers nothing to follow
            return None
        return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)

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
        if self.owner is None:  # V2: what an `if isinstance(<name>, ...)` body does applies to a wrapper
            # class (0.34.0: BaseLayerWithLoRA, PPMissingLayer), not to what the target class holds
            skipped = {id(n) for node in walked if isinstance(node, ast.If) and self._isinstance_test(node.test, aliases)
                       for stmt in node.body for n in ast.walk(stmt)}
            walked = tuple(n for n in walked if id(n) not in skipped)
        guarded: set[Path] = set()
        self._alias_reads(walked, aliases, _none_raises(walked, where), guarded, where)
        if self.owner is None:
            self._returned_reads(walked, aliases, guarded, where)
        self._hasattr_reads(walked, aliases, guarded, where)
        self._plain_reads(walked, aliases, guarded, where)
        for node in walked:  # what is handed to the draft: <alias path> assigned to self.<...>
            if isinstance(node, ast.Assign) and any(self._handed(t, aliases) for t in node.targets):
                self.shared.update(p for p, _ in self._paths(node.value, aliases) if p)
        if depth < _DELEGATION_DEPTH:
            self._delegations(walked, relpath, aliases, depth)

    def _alias_reads(self, walked, aliases: dict[str, list[Path]], none_raises: dict[str, str | None],
                     guarded: set[Path], where) -> None:
        """Aliases first, in source order: name = <alias path>.x / getattr(<alias path>, "x", default)."""
        for node in sorted((n for n in walked if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            found_paths = self._paths(node.value, aliases)
            # `x = getattr(a, "y", None) or getattr(a, "z", None)` whose None raises: one of them must exist
            either = tuple(p for p, default in found_paths if p and default) if name in none_raises else ()
            for path, default in found_paths:
                if not path:
                    continue
                aliases.setdefault(name, [])
                if path not in aliases[name]:
                    aliases[name].append(path)
                if default:  # getattr with a default: guarded unless its None raises
                    self._note(path, name in none_raises, none_raises.get(name) or where(node),
                               tuple(p for p in either if p != path) if len(either) > 1 else ())
                    if name not in none_raises:
                        guarded.add(path)

    def _returned_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """V2: a helper returning `getattr(<alias>, "x", None) or ...` reads x, guarded (0.34.0 get_target_lm_head)."""
        for node in walked:
            if isinstance(node, ast.Return) and node.value is not None:
                for path, default in self._paths(node.value, aliases):
                    if path and default:
                        self._note(path, False, where(node))
                        guarded.add(path)
                        self.shared.add(path)  # its caller hands what it returns to the draft

    def _hasattr_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """hasattr guards, and hasattr chains that end in raise."""
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

    def _plain_reads(self, walked, aliases: dict[str, list[Path]], guarded: set[Path], where) -> None:
        """Plain attribute reads through an alias: every prefix of the path, required unless guarded."""
        for node in walked:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                found = _chain(node)
                if found is None or found[0] not in aliases:
                    continue
                for base in aliases[found[0]]:
                    full = base + found[1]
                    for i in range(len(base) + 1, len(full) + 1):
                        self._note(full[:i], full[:i] not in guarded, where(node))

    def _delegations(self, walked, relpath: str, aliases: dict[str, list[Path]], depth: int) -> None:
        """Delegation: self.method(<alias>, ...) (V1), or a module function called with one (V2), followed."""
        for node in walked:
            if not isinstance(node, ast.Call):
                continue
            passed = {i: aliases[a.id] for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id in aliases}
            if not passed:
                continue
            if (self.owner is not None and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                found = self.tree.find_member(self.owner, node.func.attr)
                if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                fn_node, fn_relpath, skip = found[1], found[0].relpath, 1
            elif self.owner is None and isinstance(node.func, ast.Name):
                fn_node = self._module_function(node.func.id)
                if fn_node is None:
                    continue
                fn_relpath, skip = relpath, 0
            else:
                continue
            params = [a.arg for a in fn_node.args.args[skip:]]
            inner = {params[i]: list(p) for i, p in passed.items() if i < len(params)}
            self.function(fn_node, fn_relpath, inner, depth + 1)

    def _paths(self, expr: ast.expr, aliases: dict[str, list[Path]]) -> list[tuple[Path, bool]]:
        """(path, has a default) for ``alias.x.y`` or ``getattr(alias..., "x", d)``; one per path of the alias.
        In a module-level loader (V2) ``a or b`` holds the paths of both."""
        if self.owner is None and isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            return [found for value in expr.values for found in self._paths(value, aliases)]
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


def _proposer_loader(tree: SourceTree, generation: Generation = V1
                     ) -> tuple[ClassRef | None, str, ast.FunctionDef, str] | None:
    """The generation's draft loader: ``(class or None, relpath, function, module)``, None when absent.

    V1: ``EagleProposer.load_model`` through the class's MRO; V2: the module-level ``load_eagle_model``.
    """
    if generation.loader_class:
        cls = tree.find_class(generation.loader_module, generation.loader_class)
        if cls is None:
            return None
        found = tree.find_member(cls, generation.loader)
        if found is None or not isinstance(found[1], ast.FunctionDef):
            return None
        return cls, found[0].relpath, found[1], found[0].module
    relpath = tree.relpath_of_module(generation.loader_module)
    if relpath is None:
        return None
    try:
        body = tree.module_tree(generation.loader_module).body
    except Exception:  # noqa: BLE001 - a loader module that does not parse is a loader not found
        return None
    fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == generation.loader), None)
    return None if fn is None else (None, relpath, fn, generation.loader_module)


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


_DERIVED: "weakref.WeakKeyDictionary[SourceTree, dict]" = weakref.WeakKeyDictionary()


def derive(tree: SourceTree, with_aux: bool = True, choice: RunnerChoice | None = None) -> Derivation:
    """Read the draft loader and aux-id setter of the runner the serve uses: the paths they take through
    the target (once per tree and runner).

    Args:
        tree: the install's sources (patched or planned: overrides are read too).
        with_aux: also read the runners for where the aux ids come from (every file under
            ``vllm/v1/worker`` naming the setter); the loader's reads alone need only the loader.
        choice: the runner to follow (default: :func:`patchkit.vllm.runner.serving.serving_runner` of
            ``tree`` in patchkit's environment).
    Returns:
        A :class:`Derivation` naming the runner it followed (empty fields when the code has no such read;
        see :attr:`Derivation.empty`; ``aux`` empty without ``with_aux``; ``not_checked`` set when the
        install lacks the runner's loader or setter).
    Raises:
        SourceError: a loader or runner module does not parse.
    """
    choice = choice if choice is not None else serving_runner(tree)
    cache = _DERIVED.setdefault(tree, {})
    key = (choice.name, choice.missing, with_aux)
    if key in cache:
        return cache[key]
    proposer_key = (choice.name, choice.missing, False)
    if proposer_key not in cache:
        cache[proposer_key] = _derive_proposer(tree, choice)
    derived = cache[proposer_key]
    if with_aux:
        derived = dataclasses.replace(derived, aux=tuple(_own_aux(aux_sources(tree), choice)))
        cache[key] = derived
    return derived


def _own_aux(sources: list[AuxSource], choice: RunnerChoice) -> list[AuxSource]:
    """The aux sources of the followed runner: V2's are in files under its runner's folder
    (``vllm/v1/worker/gpu/``), V1's are the others; all of them when no runner was found."""
    if choice.generation is None:
        return sources
    v2_folder = V2.runner.rsplit("/", 1)[0] + "/"
    own = [a for a in sources if a.location.startswith(v2_folder) == (choice.generation is V2)]
    return own


def _derive_proposer(tree: SourceTree, choice: RunnerChoice) -> Derivation:
    """The loader's part of :func:`derive` (``aux`` left empty)."""
    generation = choice.generation
    reader = "speculator" if generation is not None and not generation.loader_class else "proposer"
    not_checked = choice.not_checked()
    found = _proposer_loader(tree, generation) if generation is not None else None
    reads: tuple[Read, ...] = ()
    image: tuple[ImageTokenRead, ...] = ()
    loader = language_model = None
    if found is not None:
        owner_cls, relpath, fn, module = found
        loader = f"{relpath}:{fn.lineno}"
        image = tuple(_image_token(fn, relpath))
        variables = [(t.id, n) for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name) and isinstance(n.value, ast.Call)
                     and any(isinstance(c, ast.Attribute) and c.attr == GETTER for c in ast.walk(n.value.func))]
        if not variables and owner_cls is None:  # V2: `x = target.get_language_model() if hasattr(...) else target`
            variables = [(t.id, n) for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                         if isinstance(t, ast.Name) and any(
                             isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == GETTER
                             for c in ast.walk(n.value))]
        if variables:
            name, node = variables[0]
            language_model = f"{relpath}:{node.lineno}"
            reader_ = _Reader(tree, owner_cls, None if owner_cls is not None else module)
            reader_.function(fn, relpath, {name: [()]})
            keep = {p[:i] for p in reader_.shared for i in range(1, len(p) + 1)}
            reads = tuple(Read(p, e["required"], e["location"], tuple(a for a in e["alternatives"] if a in keep))
                          for p, e in sorted(reader_.reads.items(), key=lambda kv: (len(kv[0]), kv[0])) if p in keep)
    elif not_checked is None and generation is not None:
        not_checked = (f"not checked: the draft loader of the {generation.name} runner is missing (patchkit looked "
                       f"for {generation.loader_file} {generation.loader_name})")
    return Derivation(loader, language_model, reads, image, (), choice.name, choice.reason, not_checked, reader)


__all__ = ["AuxSource", "Derivation", "ImageTokenRead", "Read", "derive"]


def _none_raises(walked, where) -> dict[str, str | None]:
    """Names whose None raises: `if x is None: raise ...` (None), or a raise deeper in it (file:line, 0.34.0 V2)."""
    none_raises: dict[str, str | None] = {}
    for node in walked:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Is)
                and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value is None):
            if any(isinstance(s, ast.Raise) for s in node.body):
                none_raises[node.test.left.id] = None
            else:
                nested = next((n for n in _walk_body(node.body) if isinstance(n, ast.Raise)), None)
                if nested is not None:
                    none_raises.setdefault(node.test.left.id, where(nested))
    return none_raises
