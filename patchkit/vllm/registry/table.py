"""Read vLLM's model registry statically and resolve architecture names to classes.

Fact (vLLM 0.9.2 to 0.33.0, ``vllm/model_executor/models/registry.py``): the registry is a set
of module-level dict literals mapping an architecture name (a checkpoint's ``config.json``
``architectures`` entry) to ``(module, class)``; ``_VLLM_MODELS`` merges them with ``**``
spreads, and some dicts contain ``**{k: v for k, v in OTHER.items() if ...}`` comprehensions.
Module names are relative to ``vllm.model_executor.models`` (``"kimi_k25"``) or, from 0.22,
absolute (``"vllm.models.deepseek_v4"``). Importing the file pulls in torch, so it is
evaluated here with a small interpreter for exactly those literal forms.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.errors import SourceError
from patchkit.vllm.release.source import ClassRef, SourceTree

REGISTRY_MODULE = "vllm.model_executor.models.registry"
MODELS_PACKAGE = "vllm.model_executor.models"
TARGET_GROUPS = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS")
"""The registry dicts whose architectures can be EAGLE-3 targets (``model_executor/models/registry.py``,
vLLM 0.10.2 - 0.33.0): text generation, multimodal, and the text models vLLM serves only through its
Transformers backend (``_TRANSFORMERS_SUPPORTED_MODELS``, 0.32.0 - 0.33.0). Pooling, embedding and
draft models are not targets."""
ALL_MODELS_DICT = "_VLLM_MODELS"
TRANSFORMERS_BACKEND_MODULES = frozenset({"transformers", f"{MODELS_PACKAGE}.transformers"})


@dataclass(frozen=True)
class RegistryEntry:
    """One registry row: ``architecture -> (module, class_name)``.

    Attributes:
        architecture: the name a checkpoint's ``architectures`` lists.
        module: absolute dotted module name (relative names already expanded).
        class_name: the class the registry names in that module.
        lineno: line of the row in ``registry.py`` (the spread's line for rows built by a comprehension).
    """

    architecture: str
    module: str
    class_name: str
    lineno: int


@dataclass(frozen=True)
class Resolution:
    """An architecture resolved to its class.

    Attributes:
        entry: the registry row.
        cls: the class definition (followed through re-exports), or None if the module or class is missing.
        aliases: every architecture of this release whose row names the same class (sorted): the
            same module and class, or the same class name re-exported by another module. A row
            that re-exports it under another name is not found (that would parse every model file).
        transformers_backend: the row points at vLLM's Transformers backend, not a native model file.
    """

    entry: RegistryEntry
    cls: ClassRef | None
    aliases: tuple[str, ...]
    transformers_backend: bool


class _Unsupported(Exception):
    pass


class Registry:
    """The static model registry of one vLLM install.

    Args:
        tree: the install's :class:`~patchkit.vllm.release.source.SourceTree`.
    Raises:
        SourceError: ``registry.py`` is missing, does not parse, or has no ``_VLLM_MODELS``.
    """

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.relpath = tree.relpath_of_module(REGISTRY_MODULE) or "vllm/model_executor/models/registry.py"
        module = tree.module_tree(REGISTRY_MODULE)
        self.skipped: list[str] = []
        """Registry statements patchkit could not evaluate (shown by ``resolve``; never guessed)."""
        self.groups: dict[str, dict[str, RegistryEntry]] = {}
        """Every registry dict read, by name (``_TEXT_GENERATION_MODELS``, ``_MULTIMODAL_MODELS``, ...)."""
        self.entries: dict[str, RegistryEntry] = self._evaluate(module)
        self._by_class_name: dict[str, list[tuple[str, RegistryEntry]]] | None = None

    def _evaluate(self, module: ast.Module) -> dict[str, RegistryEntry]:
        env = self.groups
        unreadable: dict[str, str] = {}  # dict name -> why it was skipped
        for stmt in module.body:
            target: str | None = None
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                target, value = stmt.targets[0].id, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                target, value = stmt.target.id, stmt.value
            if target is None or not isinstance(value, ast.Dict):
                continue
            try:
                rows = self._eval_dict(value, env)
            except _Unsupported as exc:
                why = f"{self.relpath}:{stmt.lineno}: {target}: {exc}"
                self.skipped.append(why)
                unreadable[target] = why
                continue
            if rows:
                env[target] = rows
        if ALL_MODELS_DICT not in env:
            why = unreadable.get(ALL_MODELS_DICT)
            raise SourceError(
                f"{self.relpath} has no {ALL_MODELS_DICT} dict patchkit can read" + (f" ({why})" if why else ""),
                "this vLLM's registry has a shape patchkit does not know; report it with the vLLM version",
            )
        return env[ALL_MODELS_DICT]

    def _eval_dict(self, node: ast.Dict, env: dict[str, dict[str, RegistryEntry]]) -> dict[str, RegistryEntry]:
        rows: dict[str, RegistryEntry] = {}
        for key, value in zip(node.keys, node.values):
            if key is None:  # ** spread
                if isinstance(value, ast.Name):
                    if value.id not in env:
                        raise _Unsupported(f"spread of unknown name {value.id}")
                    rows.update(env[value.id])
                elif isinstance(value, ast.Dict):
                    rows.update(self._eval_dict(value, env))
                elif isinstance(value, ast.DictComp):
                    rows.update(self._eval_comprehension(value, env))
                else:
                    raise _Unsupported(f"spread of {type(value).__name__}")
                continue
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _Unsupported("non-string key")
            module, class_name = _pair(value)
            rows[key.value] = RegistryEntry(key.value, _absolute(module), class_name, key.lineno)
        return rows

    def _eval_comprehension(
        self, node: ast.DictComp, env: dict[str, dict[str, RegistryEntry]]
    ) -> dict[str, RegistryEntry]:
        # Supported form: {k: (mod, arch) for k, (mod, arch) in NAME.items() if <test>}
        if len(node.generators) != 1:
            raise _Unsupported("comprehension with several for clauses")
        gen = node.generators[0]
        it = gen.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
            and isinstance(it.func.value, ast.Name)
            and it.func.value.id in env
            and not it.args
        ):
            raise _Unsupported("comprehension over something other than KNOWN_DICT.items()")
        source = env[it.func.value.id]
        out: dict[str, RegistryEntry] = {}
        for arch, entry in source.items():
            row = (entry.module.removeprefix(f"{MODELS_PACKAGE}."), entry.class_name)
            scope: dict[str, object] = {}
            _bind(gen.target, (arch, row), scope)
            if all(_truth(cond, scope) for cond in gen.ifs):
                key = _value(node.key, scope)
                value = _value(node.value, scope)
                if not (isinstance(key, str) and isinstance(value, tuple) and len(value) == 2):
                    raise _Unsupported("comprehension producing something other than name -> (module, class)")
                out[key] = RegistryEntry(key, _absolute(str(value[0])), str(value[1]), node.lineno)
        return out

    # -- queries ---------------------------------------------------------------------------

    def entry(self, architecture: str) -> RegistryEntry | None:
        """The registry row for ``architecture``, or None when this release does not register it."""
        return self.entries.get(architecture)

    def group_of(self, architecture: str, among: tuple[str, ...] | None = None) -> str | None:
        """The first registry dict (other than ``_VLLM_MODELS``; of ``among`` when given) that lists
        ``architecture``, or None.

        Fact (vLLM 0.10.2 - 0.34.0, ``model_executor/models/registry.py``): text models are in
        ``_TEXT_GENERATION_MODELS``, multimodal wrappers in ``_MULTIMODAL_MODELS``. A name may be in
        several dicts (0.33.0 and 0.34.0: ``LlavaNextForConditionalGeneration``,
        ``Phi3VForCausalLM`` and ``Qwen2VLForConditionalGeneration`` are in ``_EMBEDDING_MODELS``,
        which comes first, and in ``_MULTIMODAL_MODELS``): pass ``among`` (:data:`TARGET_GROUPS`)
        to ask whether it is a target at all.
        """
        for name, rows in self.groups.items():
            if name != ALL_MODELS_DICT and architecture in rows and (among is None or name in among):
                return name
        return None

    def resolve(self, architecture: str) -> Resolution | None:
        """Resolve ``architecture`` to its class, or None when it is not in this registry.

        Raises:
            SourceError: the module the registry names does not parse.
        """
        entry = self.entries.get(architecture)
        if entry is None:
            return None
        backend = entry.module in TRANSFORMERS_BACKEND_MODULES
        cls = None if backend else self.tree.find_class(entry.module, entry.class_name)
        aliases = tuple(
            sorted(
                a
                for a, e in self._rows_naming(entry.class_name)
                if (e.module, e.class_name) == (entry.module, entry.class_name)
            )
        )
        if cls is not None:
            aliases = tuple(sorted(set(aliases) | set(self._aliases_of(cls))))
        return Resolution(entry=entry, cls=cls, aliases=aliases, transformers_backend=backend)

    def _rows_naming(self, class_name: str) -> list[tuple[str, RegistryEntry]]:
        """The ``(architecture, entry)`` rows whose class name is ``class_name``, in registry order
        (indexed once: ``scan`` resolves every architecture, each against every row)."""
        if self._by_class_name is None:
            self._by_class_name = {}
            for arch, e in self.entries.items():
                self._by_class_name.setdefault(e.class_name, []).append((arch, e))
        return self._by_class_name.get(class_name, [])

    def _aliases_of(self, cls: ClassRef) -> list[str]:
        # Rows naming the same class through another module's re-export count as aliases too.
        out = []
        for arch, e in self._rows_naming(cls.name):
            if e.module != cls.module and e.module not in TRANSFORMERS_BACKEND_MODULES:
                if self.tree.find_class(e.module, e.class_name) == cls:
                    out.append(arch)
        return out


def _absolute(module: str) -> str:
    return module if module.startswith("vllm.") else f"{MODELS_PACKAGE}.{module}"


def _pair(node: ast.expr) -> tuple[str, str]:
    if (
        isinstance(node, ast.Tuple)
        and len(node.elts) == 2
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
    ):
        return node.elts[0].value, node.elts[1].value  # type: ignore[attr-defined]
    raise _Unsupported("value that is not a (module, class) pair of string literals")


def _bind(target: ast.expr, value: object, scope: dict[str, object]) -> None:
    if isinstance(target, ast.Name):
        scope[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            _bind(t, v, scope)
    else:
        raise _Unsupported("comprehension target patchkit cannot unpack")


def _value(node: ast.expr, scope: dict[str, object]) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in scope:
            raise _Unsupported(f"unknown name {node.id} in comprehension")
        return scope[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e, scope) for e in node.elts)
    raise _Unsupported(f"{type(node).__name__} in comprehension")


def _truth(node: ast.expr, scope: dict[str, object]) -> bool:
    if isinstance(node, ast.BoolOp):
        results = (_truth(v, scope) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _truth(node.operand, scope)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _value(node.left, scope), _value(node.comparators[0], scope)
        op = node.ops[0]
        if isinstance(op, ast.Eq):
            return left == right
        if isinstance(op, ast.NotEq):
            return left != right
        if isinstance(op, ast.In):
            return left in right  # type: ignore[operator]
        if isinstance(op, ast.NotIn):
            return left not in right  # type: ignore[operator]
    raise _Unsupported(f"condition {ast.unparse(node)}")
