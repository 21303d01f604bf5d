"""Which speculative method vLLM picks for a draft checkpoint, the name it asks the registry for, and how the
class it builds sizes its input: read from the release's own files, by shape (never by version, never from a
list of method names).

Facts (vLLM 0.34.0 unless said; each read as described, so a release that changes the shape reads as "not found"):

- **Declared.** The draft config is renamed first (``hf_config_override`` is the draft ``ModelConfig``'s
  ``hf_overrides``, ``compose_draft_hf_overrides``; see *Architecture*). A draft class may declare its method:
  ``speculator_config_class = DFlashSpeculatorConfig`` (``model_executor/models/qwen3_dflash.py``
  ``DFlashQwen3ForCausalLM``; ``qwen3_dflash2.py``
  ``DFlash2SpeculatorConfig``; ``qwen3_dspark.py`` ``DSparkSpeculatorConfig``). The config class's
  ``base_method`` (through its bases) names the method: ``"dflash"`` (``v1/worker/gpu/spec_decode/dflash/config.py``;
  ``DFlash2SpeculatorConfig`` inherits it), ``"dspark"`` (``dspark/config.py``). ``speculator_config.py``
  ``_resolve_checkpoint_config_class`` takes the declared class first when no method is given.
- **Detected by path.** Otherwise the config classes' ``matches`` are tried in ``_CHECKPOINT_DETECTION_ORDER``;
  each returns ``"<word>" in spec.draft_model_config.model.lower()``: the draft's path (``"eagle-"``,
  ``"eagle3"``, ``"dflash"``, ``"dspark"``). vLLM 0.20.2 - 0.33.0 write the same test inline in
  ``config/speculative.py`` (``elif "dflash" in self.draft_model_config.model.lower(): self.method = "dflash"``,
  from 0.20.2; ``"dspark"`` from 0.25.0); both shapes are read, in the release's order.
- **Aux states.** The method's config class's ``uses_aux_hidden_states`` returns ``True`` (DFlash, and through
  it DFlash2 and DSpark; ``extract_hidden_states_config.py``; EAGLE-3): the runner then sets the target's aux
  layers with ``set_eagle3_aux_hidden_state_layers``, the EAGLE-3 interface or ``RuntimeError``. Releases
  before the config classes (0.33.0 and older) are "not found".
- **Architecture.** ``SpeculativeConfig.hf_config_override`` (``config/speculative.py``) renames some drafts
  first, each by a test ``initial_architecture == "X"`` with ``hf_config.model_type == "Y"`` or
  ``getattr(hf_config, "F", None)`` and ``hf_config.update({"architectures": ["Z"]})`` (``DSparkDraftModel``
  with model type ``qwen3`` -> ``Qwen3DSparkModel``; ``DFlash2DraftModel`` with ``no_rope_layers`` ->
  ``DFlash2RicursiveDraftModel``). Then ``EAGLEConfig.__init__`` (``transformers_utils/configs/eagle.py``)
  rewrites the name for a method it has a branch for (``method == "dflash"``: ``arch if arch.startswith("DFlash")
  or arch.endswith("DFlash") or arch == "LiLiCorrDraftModel" else f"DFlash{arch}"``); a method without one
  (``dspark``, whose config class does not wrap the draft config) is looked up as written.
- **Width.** A draft class one of whose MRO's modules sizes the ``fc`` with ``len(...)`` of
  ``get_eagle3_aux_layers_from_config(...)`` (``qwen3_dflash.py`` ``_get_dflash_fc_input_size``:
  ``(target_hidden_size or hidden_size) * len(ids)``, the draft's ``num_hidden_layers`` when the reader gives
  no ids; DFlash2's and Qwen3 DSpark's classes inherit it) takes one state per id the runner reads.

The declared units behind these facts are :mod:`patchkit.vllm.runner.units`' ``method-*`` units.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Any

from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import ClassRef, SourceTree
from patchkit.vllm.runner.generations import V2

SPECULATIVE_MODULE = "vllm.config.speculative"
"""Module of ``SpeculativeConfig`` (``hf_config_override``; the inline method detection of 0.20.2 - 0.33.0)."""
SPEC_DECODE_FOLDER = "vllm/v1/worker/gpu/spec_decode"
"""Folder of the V2 speculators and their config classes (0.34.0: ``*/config.py``, ``*_config.py``)."""
EAGLE_CONFIG_MODULE = "vllm.transformers_utils.configs.eagle"
EAGLE_CONFIG_CLASS = "EAGLEConfig"
"""The config wrapper that rewrites a draft's architecture per method."""
DECLARED = "speculator_config_class"
BASE_METHOD = "base_method"
USES_AUX = "uses_aux_hidden_states"
DETECTION_ORDER = "_CHECKPOINT_DETECTION_ORDER"
OVERRIDE = "hf_config_override"
EAGLE3 = "eagle3"
"""The method patchkit's draft checks assume when vLLM picks none by itself (the user passes it)."""
DFLASH = "dflash"
"""DFlash's method (vLLM's ``SpeculativeConfig.method`` value; ``base_method`` of ``DFlashSpeculatorConfig``)."""
DSPARK = "dspark"
"""DSpark's method (``base_method`` of ``DSparkSpeculatorConfig``; the path word from 0.25.0)."""


@dataclass(frozen=True)
class MethodPick:
    """The speculative method vLLM picks for a draft.

    Attributes:
        method: the method's name (``"dflash"``).
        how: how vLLM picks it, in words.
        location: ``file:line`` of the declaration or test.
        aux: the method's config class turns ``uses_aux_hidden_states`` on (None: its config class is not found).
        config_class: ``module.Class`` of that config class (None: not found).
    """

    method: str
    how: str
    location: str
    aux: bool | None
    config_class: str | None


def draft_method(tree: SourceTree, registry: Registry, data: dict[str, Any], path: str) -> MethodPick | None:
    """The method vLLM picks for the draft at ``path`` with ``config.json`` ``data``, when none is given.

    Args:
        tree: the install's sources; registry: its model registry.
        data: the draft's ``config.json``; path: the draft's path as the user passes it to vLLM.
    Returns:
        A :class:`MethodPick` (declared first, then by path), or None when vLLM picks none from the draft.
    Raises:
        SourceError: a file read does not parse.
    """
    listed = data.get("architectures")
    archs = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []  # damaged: doctor says
    renamed = _override(tree, archs[0], data) if archs else None
    if isinstance(renamed, tuple):  # hf_config_override runs as the draft config's hf_overrides, before the lookup
        archs = [renamed[0], *archs[1:]]
    for arch in archs:
        entry = registry.entry(arch)
        cls = (
            tree.find_class(entry.module, entry.class_name)
            if entry is not None and tree.has_module(entry.module)
            else None
        )
        for klass in tree.mro(cls) if cls is not None else ():
            for stmt in tree.class_node(klass).body:
                value = _assigned(stmt, DECLARED)
                if value is None:
                    continue
                config = tree.resolve_expr(klass.module, value)
                if isinstance(config, ClassRef):
                    method = _class_constant(tree, config, BASE_METHOD)
                    if method is not None:
                        where = f"{klass.relpath}:{stmt.lineno}"
                        how = f"declared by {klass.name}.{DECLARED} = {config.name} (the draft class of {arch})"
                        return MethodPick(method, how, where, _uses_aux(tree, config), f"{config.module}.{config.name}")
    lowered = path.lower()
    for word, method, where, config in _path_words(tree):
        if word in lowered:
            aux = _uses_aux(tree, config) if config is not None else None
            name = f"{config.module}.{config.name}" if config is not None else None
            return MethodPick(method, f"the draft's path contains {word!r}", where, aux, name)
    return None


def method_config(tree: SourceTree, method: str) -> ClassRef | None:
    """The config class whose ``base_method`` is ``method`` itself (not inherited), or None."""
    for ref, node in _config_classes(tree):
        if any(
            _assigned(s, BASE_METHOD) is not None and _const(_assigned(s, BASE_METHOD)) == method for s in node.body
        ):
            return ref
    return None


def _config_classes(tree: SourceTree) -> list[tuple[ClassRef, ast.ClassDef]]:
    """Every class of the speculator config modules under :data:`SPEC_DECODE_FOLDER` (0.34.0 shape)."""
    out: list[tuple[ClassRef, ast.ClassDef]] = []
    root = tree.site_packages / SPEC_DECODE_FOLDER
    for dirpath, _, files in sorted(os.walk(root)):
        for fname in sorted(files):
            if not (fname == "config.py" or fname.endswith("_config.py")):
                continue
            relpath = os.path.relpath(os.path.join(dirpath, fname), tree.site_packages).replace(os.sep, "/")
            module = relpath[:-3].replace("/", ".")
            for node in tree.module_tree(module).body:
                if isinstance(node, ast.ClassDef):
                    ref = tree.find_class(module, node.name)
                    if ref is not None:
                        out.append((ref, node))
    return out


def path_rule(tree: SourceTree, method: str) -> tuple[str, str] | None:
    """``(word, file:line)`` of the test by which this release picks ``method`` from the draft's path (the first,
    in vLLM's order: :func:`_path_words`), or None when no such test is read. Raises: SourceError (a file read)."""
    return next(((word, where) for word, m, where, _c in _path_words(tree) if m == method), None)


def _path_words(tree: SourceTree) -> list[tuple[str, str, str, ClassRef | None]]:
    """``(word, method, file:line, config class)`` of every test ``"<word>" in ....model.lower()``, in the
    order vLLM tries them: the config classes' ``matches`` (in :data:`DETECTION_ORDER` when the release has it),
    else the inline ``if``/``elif`` arms of ``config/speculative.py`` in source order."""
    found: list[tuple[str, str, str, ClassRef | None]] = []
    for ref, node in _config_classes(tree):
        fn = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "matches"), None)
        method = _class_constant(tree, ref, BASE_METHOD)
        if fn is None or method is None:
            continue
        for word, line in _model_words(fn):
            found.append((word, method, f"{ref.relpath}:{line}", ref))
    order = _detection_order(tree)
    if found:
        rank = {m: i for i, m in enumerate(order)}
        return sorted(found, key=lambda f: rank.get(f[1], len(rank)))
    if tree.relpath_of_module(SPECULATIVE_MODULE) is None:
        return []
    relpath = tree.relpath_of_module(SPECULATIVE_MODULE)
    for node in ast.walk(tree.module_tree(SPECULATIVE_MODULE)):
        if not isinstance(node, ast.If):
            continue
        method = next(
            (
                _const(s.value)
                for s in node.body
                if isinstance(s, ast.Assign)
                and any(isinstance(t, ast.Attribute) and t.attr == "method" for t in s.targets)
                and _const(s.value)
            ),
            None,
        )
        if method is not None:
            for word, line in _model_words(node.test):
                found.append((word, method, f"{relpath}:{line}", method_config(tree, method)))
    return sorted(found, key=lambda f: int(f[2].rsplit(":", 1)[1]))


def _model_words(node: ast.AST) -> list[tuple[str, int]]:
    """The constants ``c`` of every ``c in <x>.model.lower()`` under ``node``, with their lines."""
    out = []
    for n in ast.walk(node):
        if (
            isinstance(n, ast.Compare)
            and len(n.ops) == 1
            and isinstance(n.ops[0], ast.In)
            and _const(n.left)
            and isinstance(n.comparators[0], ast.Call)
            and isinstance(n.comparators[0].func, ast.Attribute)
            and n.comparators[0].func.attr == "lower"
            and isinstance(n.comparators[0].func.value, ast.Attribute)
            and n.comparators[0].func.value.attr == "model"
        ):
            out.append((_const(n.left), n.lineno))
    return out


def _detection_order(tree: SourceTree) -> list[str]:
    """The methods of :data:`DETECTION_ORDER` in ``speculator_config.py`` (empty: not in this release)."""
    module = f"{SPEC_DECODE_FOLDER}/speculator_config".replace("/", ".")
    if tree.relpath_of_module(module) is None:
        return []
    for node in tree.module_tree(module).body:
        value = _assigned(node, DETECTION_ORDER)
        if isinstance(value, (ast.Tuple, ast.List)):
            return [c for c in map(_const, value.elts) if c]
    return []


def _uses_aux(tree: SourceTree, config: ClassRef) -> bool | None:
    """What the first :data:`USES_AUX` in ``config``'s MRO returns: its one ``return`` of a bool constant
    (None: no such member, or another body)."""
    for klass in tree.mro(config):
        fn = tree.method(klass, USES_AUX)
        if fn is None:
            continue
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        if (
            len(returns) == 1
            and isinstance(returns[0].value, ast.Constant)
            and isinstance(returns[0].value.value, bool)
        ):
            return returns[0].value.value
        return None
    return None


def _class_constant(tree: SourceTree, ref: ClassRef, name: str) -> str | None:
    """The string constant assigned to ``name`` in the first class of ``ref``'s MRO that assigns it."""
    for klass in tree.mro(ref):
        for stmt in tree.class_node(klass).body:
            value = _assigned(stmt, name)
            if value is not None:
                return _const(value)
    return None


def _assigned(stmt: ast.AST, name: str) -> ast.expr | None:
    """The value ``stmt`` assigns to the plain name ``name`` (``x = v`` or ``x: T = v``), else None."""
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
        return stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
        return stmt.value
    return None


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def aux_methods(tree: SourceTree) -> list[str]:
    """The methods whose own config class turns ``uses_aux_hidden_states`` on and proposes draft tokens (no
    ``proposes_draft_tokens = False`` in its MRO; hidden-state extraction sets it), in file order; empty on a
    release without the speculator config classes (0.33.0 and older)."""
    out: list[str] = []
    for ref, node in _config_classes(tree):
        own = next(
            (_const(_assigned(s, BASE_METHOD)) for s in node.body if _assigned(s, BASE_METHOD) is not None), None
        )
        if own is None or own in out or _uses_aux(tree, ref) is not True:
            continue
        quiet = next(
            (v for k in tree.mro(ref) for s in tree.class_node(k).body if (v := _assigned(s, "proposes_draft_tokens"))),
            None,
        )
        if not (isinstance(quiet, ast.Constant) and quiet.value is False):
            out.append(own)
    return out


# -- the architecture vLLM asks the registry for -------------------------------------------------


def draft_architecture(tree: SourceTree, method: str, arch: str, data: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The name vLLM asks its registry for when it builds draft ``arch`` (the first listed) for ``method``.

    Args:
        tree: the install's sources; method: the picked method; arch: the draft's first architecture;
        data: the draft's ``config.json`` (the renames test its ``model_type`` and fields).
    Returns:
        ``(name, steps)``: ``name`` None when a rule that applies cannot be read (not checked); ``steps`` each
        rename with its ``file:line``, in words.
    Raises:
        SourceError: a file read does not parse.
    """
    steps: list[str] = []
    renamed = _override(tree, arch, data)
    if renamed is False:
        return None, [f"a rename in SpeculativeConfig.{OVERRIDE} for {arch} has a test patchkit does not read"]
    if renamed is not None:
        arch, where = renamed
        steps.append(f"SpeculativeConfig.{OVERRIDE} renames it {arch} ({where})")
    rule = _eagle_config_rule(tree, method)
    if rule is None:
        return arch, steps
    test, prefix, where = rule
    kept = _arch_test(test, arch)
    if kept is None:
        return None, [
            *steps,
            f"{EAGLE_CONFIG_CLASS}'s rule for method {method!r} has a test patchkit does not read ({where})",
        ]
    if not kept:
        arch = f"{prefix}{arch}"
        steps.append(f"{EAGLE_CONFIG_CLASS} (method {method!r}) prefixes {prefix!r}: {arch} ({where})")
    return arch, steps


def _override(tree: SourceTree, arch: str, data: dict[str, Any]) -> tuple[str, str] | bool | None:
    """The rename ``hf_config_override`` gives ``arch``: ``(new name, file:line)``; None: none; False: a rule for
    ``arch`` with a test not read."""
    relpath = tree.relpath_of_module(SPECULATIVE_MODULE)
    cls = tree.find_class(SPECULATIVE_MODULE, "SpeculativeConfig") if relpath is not None else None
    fn = tree.method(cls, OVERRIDE) if cls is not None else None
    if fn is None:
        return None
    for stmt in fn.body:
        if not isinstance(stmt, ast.If):
            continue
        tests = (
            stmt.test.values if isinstance(stmt.test, ast.BoolOp) and isinstance(stmt.test.op, ast.And) else [stmt.test]
        )
        names = [_const(t.comparators[0]) for t in tests if _is_eq(t) and _name_of(t.left) == "initial_architecture"]
        if arch not in names:
            continue
        new = [
            _const(v.elts[0])
            for n in ast.walk(ast.Module(body=stmt.body, type_ignores=[]))
            if isinstance(n, ast.Dict)
            for k, v in zip(n.keys, n.values)
            if _const(k) == "architectures" and isinstance(v, ast.List) and len(v.elts) == 1 and _const(v.elts[0])
        ]
        if not new:
            continue  # a rule that keeps the name (it normalises fields)
        holds = [_field_test(t, data) for t in tests if not (_is_eq(t) and _name_of(t.left) == "initial_architecture")]
        if any(h is None for h in holds):
            return False
        if all(holds):
            return new[0], f"{relpath}:{stmt.lineno}"
    return None


def _field_test(test: ast.expr, data: dict[str, Any]) -> bool | None:
    """``hf_config.F == "c"`` or ``getattr(hf_config, "F", None)`` on the draft's config (None: another test)."""
    if _is_eq(test) and isinstance(test.left, ast.Attribute) and _const(test.comparators[0]) is not None:
        return data.get(test.left.attr) == _const(test.comparators[0])
    if isinstance(test, ast.Call) and _name_of(test.func) == "getattr" and len(test.args) >= 2 and _const(test.args[1]):
        return bool(data.get(_const(test.args[1])))
    return None


def _eagle_config_rule(tree: SourceTree, method: str) -> tuple[ast.expr, str, str] | None:
    """``(test, prefix, file:line)`` of ``EAGLEConfig``'s ``arch if <test> else f"<prefix>{arch}"`` under
    ``if method == "<method>"`` (None: no branch for the method)."""
    cls = tree.find_class(EAGLE_CONFIG_MODULE, EAGLE_CONFIG_CLASS) if tree.has_module(EAGLE_CONFIG_MODULE) else None
    fn = tree.method(cls, "__init__") if cls is not None else None
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.If) and _is_eq(node.test) and _const(node.test.comparators[0]) == method:
            for n in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if (
                    isinstance(n, ast.IfExp)
                    and isinstance(n.orelse, ast.JoinedStr)
                    and n.orelse.values
                    and _const(n.orelse.values[0])
                ):
                    return n.test, _const(n.orelse.values[0]), f"{cls.relpath}:{n.lineno}"
    return None


def _arch_test(test: ast.expr, arch: str) -> bool | None:
    """``test`` evaluated for ``arch``: ``or``/``and`` of ``x.startswith(c)``, ``x.endswith(c)``, ``x == c``."""
    if isinstance(test, ast.BoolOp):
        parts = [_arch_test(v, arch) for v in test.values]
        if any(p is None for p in parts):
            return None
        return any(parts) if isinstance(test.op, ast.Or) else all(parts)
    if _is_eq(test) and _const(test.comparators[0]) is not None:
        return arch == _const(test.comparators[0])
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and len(test.args) == 1:
        word = _const(test.args[0])
        if word is not None and test.func.attr == "startswith":
            return arch.startswith(word)
        if word is not None and test.func.attr == "endswith":
            return arch.endswith(word)
    return None


def _is_eq(node: ast.AST) -> bool:
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)


def _name_of(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


# -- the draft's input width --------------------------------------------------------------------


def sizes_by_ids(tree: SourceTree, draft_class: str | None) -> str | None:
    """``file:line`` of the function that sizes draft class ``draft_class``'s (``module.Class``) input by the
    number of ids the runner's reader gives (``len(...)`` of a call of it), in a module of its MRO; None: none.

    Raises:
        SourceError: a module does not parse.
    """
    if draft_class is None:
        return None
    module, _, name = draft_class.rpartition(".")
    cls = tree.find_class(module, name) if tree.has_module(module) else None
    seen: set[str] = set()
    for klass in tree.mro(cls) if cls is not None else ():
        if klass.module in seen:
            continue
        seen.add(klass.module)
        for node in tree.module_tree(klass.module).body:
            if isinstance(node, ast.FunctionDef) and _reads_count(node):
                return f"{klass.relpath}:{node.lineno}"
    return None


def _reads_count(fn: ast.FunctionDef) -> bool:
    """``fn`` assigns a name from the runner's id reader and takes its ``len``."""
    names = {
        t.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _name_of(n.value.func) == V2.aux_reader
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    return any(
        isinstance(n, ast.Call) and _name_of(n.func) == "len" and n.args and _name_of(n.args[0]) in names
        for n in ast.walk(fn)
    )


__all__ = ["EAGLE3", "MethodPick", "aux_methods", "draft_architecture", "draft_method", "method_config", "sizes_by_ids"]
