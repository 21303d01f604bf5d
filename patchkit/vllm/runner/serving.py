"""Which runner generation an install serves with, and which of its declared facts the install lacks.

Input: the install's sources (:class:`~patchkit.vllm.release.source.SourceTree`) and patchkit's environment.
Output: a :class:`RunnerChoice`. Nothing here raises on a missing file: a missing fact is returned
(``missing``), and every check that rests on it says "not checked" with it.

The rule (decided here, once; the facts are in :mod:`patchkit.vllm.runner.generations`):

- only one generation's runner file is present: that one (0.34.0: V2);
- both are present: V2 when ``VLLM_USE_V2_MODEL_RUNNER`` is ``1``/``true`` in patchkit's environment
  and the release declares the flag in ``vllm/envs.py``, V1 when it is ``0``/``false`` or unset.
  Where the release declares the flag's default as ``None`` (0.33.0), vLLM itself picks V2 on a
  platform with Triton (``config/vllm.py`` ``use_v2_model_runner``); patchkit cannot see the serving
  platform statically, so it follows V1 and says so in :attr:`RunnerChoice.reason` (set the flag to
  check V2). The serve and patchkit must then see the same flag, which ``rehearse`` ensures by
  passing its environment to the engine.
- neither: no generation (``generation`` None, every check that needs one says "not checked").
"""

from __future__ import annotations

import ast
import os
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from patchkit.vllm.runner.generations import GENERATIONS, SELECTOR, SELECTOR_FILE, V1, V2, Fact, Generation
from patchkit.vllm.runner.pins import Pins, pins
from patchkit.vllm.runner.units import Concern
from patchkit.vllm.release.source import SourceTree

_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


@dataclass(frozen=True)
class RunnerChoice:
    """The runner generation a serve of this install uses, as patchkit decided it.

    Attributes:
        generation: the generation followed (None: no runner found).
        present: the names of the generations whose runner file the install holds.
        reason: one line: why this one (shown next to every check that follows it).
        missing: the chosen generation's declared facts the install lacks (empty: all found).
        pinned: the install's declared units against the qualified releases' code
            (:func:`patchkit.vllm.runner.pins.pins`): a changed unit of the runner (and, for a caller that
            needs every fact, of the draft ids' readers) is "not checked" too.
    """

    generation: Generation | None
    present: tuple[str, ...]
    reason: str
    missing: tuple[Fact, ...] = ()
    pinned: Pins | None = None

    @property
    def name(self) -> str:
        """``"V1"``, ``"V2"`` or ``"none"``."""
        return self.generation.name if self.generation is not None else "none"

    def not_checked(self, *needed: str) -> str | None:
        """``"not checked: <what is missing, where patchkit looked>"`` when a fact the caller rests on is
        missing, else None.

        Args:
            needed: the :attr:`Fact.what` of the facts the caller needs (none: every declared fact).
        """
        if self.generation is None:
            looked = " and ".join(g.runner for g in GENERATIONS)
            return f"not checked: no vLLM model runner found (patchkit looked for {looked})"
        lacking = [f for f in self.missing if not needed or f.what in needed]
        concerns = (Concern.RUNNER,) if needed else (Concern.RUNNER, Concern.IDS)
        changed = self.pinned.not_checked(*concerns, generation=self.name) if self.pinned else None
        if not lacking:
            return changed
        missing = "not checked: " + "; ".join(
            f"{f.what} of the {self.name} runner is missing (patchkit looked for {f.where})" for f in lacking
        )
        return missing if changed is None else f"{missing}; {changed[len('not checked: ') :]}"


def declared_flag(tree: SourceTree) -> tuple[bool, str | None]:
    """Whether ``vllm/envs.py`` declares :data:`SELECTOR`, and its declared default's source text.

    Returns:
        ``(declared, default)``: ``default`` is the annotated default (``"False"``, ``"None"``) or None.
    """
    source = tree.read_bytes(SELECTOR_FILE) if _present(tree, SELECTOR_FILE) else b""
    if SELECTOR.encode() not in source:
        return False, None
    try:
        module = ast.parse(source)
    except SyntaxError:
        return True, None
    for node in ast.walk(module):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == SELECTOR
            and node.value is not None
        ):
            return True, ast.unparse(node.value)
    return True, None


def _present(tree: SourceTree, relpath: str) -> bool:
    """Whether ``relpath`` is a module file of ``tree`` (an override or a file on disk)."""
    return tree.relpath_of_module(relpath[:-3].replace("/", ".")) == relpath


def _has_name(tree: SourceTree, relpath: str, name: str) -> bool:
    """Whether ``relpath`` defines ``name`` (``function``, ``Class`` or ``Class.method``; inherited methods count).

    A bare name defined at column 0 (``class X``/``def X``) is found in the text without parsing the
    file; anything else (a member, a re-exported name) is resolved through ``tree``."""
    if not _present(tree, relpath):
        return False
    module = relpath[:-3].replace("/", ".")
    head, _, member = name.partition(".")
    if not member and re.search(
        rb"^(?:class|def|async def) " + re.escape(head.encode()) + rb"\b", tree.read_bytes(relpath), re.M
    ):
        return True  # defined at column 0: found without parsing the file (V1's runner is 0.28 MB)
    cls = tree.find_class(module, head)
    if cls is not None:
        return not member or tree.find_member(cls, member) is not None
    if member:
        return False
    try:
        body = tree.module_tree(module).body
    except Exception:  # noqa: BLE001 - a module that does not parse holds nothing
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in body)


def missing_facts(tree: SourceTree, generation: Generation) -> tuple[Fact, ...]:
    """The declared facts of ``generation`` that ``tree`` lacks (file absent, or the name not defined in it)."""
    out = []
    for fact in generation.facts():
        if fact.name == "set_aux_hidden_state_layers":
            found = _present(tree, fact.relpath) and fact.name.encode() in tree.read_bytes(fact.relpath)
        else:
            found = _has_name(tree, fact.relpath, fact.name) if fact.name else _present(tree, fact.relpath)
        if not found:
            out.append(fact)
    return tuple(out)


_CHOICES: "weakref.WeakKeyDictionary[SourceTree, dict]" = weakref.WeakKeyDictionary()


def serving_runner(tree: SourceTree, environ: Mapping[str, str] | None = None) -> RunnerChoice:
    """The generation a serve of ``tree`` uses, by the rule in the module docstring.

    Args:
        tree: the install's sources (overrides are read too).
        environ: the environment the serve sees (default: patchkit's ``os.environ``).
    Returns:
        A :class:`RunnerChoice`; never raises for a missing or unparsable file.
    """
    env = os.environ if environ is None else environ
    flag = env.get(SELECTOR)
    cache = _CHOICES.setdefault(tree, {})
    if flag in cache:
        return cache[flag]
    present = tuple(g.name for g in GENERATIONS if _present(tree, g.runner))
    declared, default = declared_flag(tree)
    if not present:
        choice = RunnerChoice(None, (), "no model runner found")
    elif len(present) == 1:
        generation = V1 if present == ("V1",) else V2
        choice = RunnerChoice(
            generation, present, f"{generation.name}: the only model runner in this install ({generation.runner})"
        )
    else:
        value = (flag or "").strip().lower()
        if declared and value in _TRUE:
            choice = RunnerChoice(V2, present, f"V2: {SELECTOR}={flag} in patchkit's environment")
        elif not declared and value in _TRUE:
            choice = RunnerChoice(
                V1,
                present,
                f"V1: {SELECTOR}={flag} is set but this release does not read it "
                f"({SELECTOR_FILE} declares no {SELECTOR})",
            )
        elif flag is not None and value in _FALSE:
            choice = RunnerChoice(V1, present, f"V1: {SELECTOR}={flag} in patchkit's environment")
        elif default == "None":
            choice = RunnerChoice(
                V1,
                present,
                f"V1: {SELECTOR} is unset; this release's default ({SELECTOR_FILE}: "
                f"None) lets vLLM pick V2 where Triton is present, so set {SELECTOR}=1 (or 0) for "
                "patchkit and the serve alike to check the runner the serve uses",
            )
        else:
            choice = RunnerChoice(
                V1, present, f"V1: the default of this release ({SELECTOR} unset; set it to 1 to check V2)"
            )
    if choice.generation is not None:
        choice = RunnerChoice(choice.generation, choice.present, choice.reason, missing_facts(tree, choice.generation))
    choice = RunnerChoice(choice.generation, choice.present, choice.reason, choice.missing, pins(tree))
    cache[flag] = choice
    return choice
