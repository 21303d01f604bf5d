"""What a target model class holds, read without importing vLLM: where an attribute is assigned,
which attribute is its language model, whether it is multimodal, and its vLLM config class.

These are the class reads the proposer's paths (:mod:`patchkit.vllm.runner.draft_reads`) are followed
through (:mod:`patchkit.vllm.chain.load_path`); each function names the release and file its fact
comes from.
"""

from __future__ import annotations

import ast
import weakref

from patchkit.vllm.classes import composition
from patchkit.vllm.runner.draft_reads import CONFIGS_PACKAGE, GETTER, const_str
from patchkit.vllm.release.source import ClassRef, SourceTree


def assigned_at(tree: SourceTree, cls: ClassRef, attr: str) -> str | None:
    """``file:line`` where ``cls`` (or a class in its MRO) gets ``attr``: ``self.attr = ...`` in an
    ``__init__``, or a class-level definition; None when nothing does."""
    for owner in tree.mro(cls):
        init = tree.method(owner, "__init__")
        if init is not None:
            for node in ast.walk(init):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
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
                for i in node.items
            ):
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
            stmt.name
            for stmt in tree.class_node(owner).body
            if isinstance(stmt, ast.FunctionDef)
            and any(
                isinstance(n, ast.Assign) and any(composition.self_attr(t) in read for t in n.targets)
                for n in ast.walk(stmt)
            )
        )
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


def config_class(tree: SourceTree, cls: ClassRef) -> ClassRef | None:
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
                ref = tree.find_class(cls.module, alias.asname or alias.name) or _lazy_export(
                    tree, node.module, alias.name
                )
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
                if k is not None and const_str(k) == name and const_str(v):
                    return tree.find_class(const_str(v), name)
    return None
