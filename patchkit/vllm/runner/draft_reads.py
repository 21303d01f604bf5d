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
from patchkit.vllm.runner.path_reader import Path, PathReader, chain, const_str
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


def _proposer_loader(
    tree: SourceTree, generation: Generation = V1
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
            elif isinstance(s, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == IMAGE_TOKEN_FIELD for t in s.targets
            ):
                found = chain(s.value)
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
        variables = [
            (t.id, n)
            for n in ast.walk(fn)
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
            and isinstance(n.value, ast.Call)
            and any(isinstance(c, ast.Attribute) and c.attr == GETTER for c in ast.walk(n.value.func))
        ]
        if not variables and owner_cls is None:  # V2: `x = target.get_language_model() if hasattr(...) else target`
            variables = [
                (t.id, n)
                for n in ast.walk(fn)
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
                and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == GETTER
                    for c in ast.walk(n.value)
                )
            ]
        if variables:
            name, node = variables[0]
            language_model = f"{relpath}:{node.lineno}"
            reader_ = PathReader(tree, owner_cls, None if owner_cls is not None else module)
            reader_.function(fn, relpath, {name: [()]})
            keep = {p[:i] for p in reader_.shared for i in range(1, len(p) + 1)}
            reads = tuple(
                Read(p, e["required"], e["location"], tuple(a for a in e["alternatives"] if a in keep))
                for p, e in sorted(reader_.reads.items(), key=lambda kv: (len(kv[0]), kv[0]))
                if p in keep
            )
    elif not_checked is None and generation is not None:
        not_checked = (
            f"not checked: the draft loader of the {generation.name} runner is missing (patchkit looked "
            f"for {generation.loader_file} {generation.loader_name})"
        )
    return Derivation(loader, language_model, reads, image, (), choice.name, choice.reason, not_checked, reader)


__all__ = ["AuxSource", "Derivation", "ImageTokenRead", "Read", "derive"]
