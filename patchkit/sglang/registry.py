"""SGLang's model registry read statically: every architecture name, the module that registers it and its class.

SGLang builds its registry at import time (``sglang/srt/models/registry.py``, ``import_model_classes``, 0.5.14 to
0.5.23): it walks the plain modules of ``sglang/srt/models/`` in name order (``pkgutil.iter_modules``; sub-packages
skipped), imports each, and reads its module-level ``EntryClass``, a class or a list of classes, keyed by each
class's ``__name__``. Here the same walk reads the files with :mod:`ast` instead of importing them, and each
``EntryClass`` element is resolved to its ``class`` statement through the module's imports
(:class:`patchkit.sglang.classes.Package`).

What the static reading cannot see: a module that fails to import at run time (SGLang logs and skips it; here it
is listed), ``SGLANG_DISABLED_MODEL_ARCHS`` and ``SGLANG_EXTERNAL_MODEL_PACKAGE`` (environment variables of the
serving process), and classes registered by a plugin package.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from patchkit.sglang.classes import ClassRef, Package
from patchkit.sglang.contract import ENTRY, MODELS_PACKAGE


@dataclass(frozen=True)
class Entry:
    """One element of one module's ``EntryClass``.

    Attributes:
        architecture: the registry key, the class's ``__name__``; for an element that does not resolve to a class
            of the package, the element's source text.
        registered_in: the module whose ``EntryClass`` names it (``sglang.srt.models.llama``).
        cls: the class statement it resolves to (possibly in another module, through an import), or None.
    """

    architecture: str
    registered_in: str
    cls: ClassRef | None


def model_modules(package: Package) -> list[str]:
    """The dotted names of the plain modules of ``sglang/srt/models/``, in ``pkgutil.iter_modules`` order (sorted
    file names; a folder is a sub-package and is skipped, as ``import_model_classes`` skips ``ispkg``)."""
    folder = package.root.joinpath(*MODELS_PACKAGE.split("."))
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError:
        return []
    return [
        f"{MODELS_PACKAGE}.{name[:-3]}"
        for name in names
        if name.endswith(".py") and name != "__init__.py" and name[:-3].isidentifier() and (folder / name).is_file()
    ]


def _entry_values(tree: ast.Module) -> list[ast.expr]:
    """The elements of the last module-level ``EntryClass = ...`` of ``tree`` (a list, a tuple, or one value)."""
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == ENTRY for t in node.targets):
            value = node.value
    if value is None:
        return []
    return list(value.elts) if isinstance(value, ast.List | ast.Tuple) else [value]


def entries(package: Package, mentioning: str | None = None) -> tuple[Entry, ...]:
    """Every registered architecture of the install, in the order SGLang registers them.

    A name registered twice (SGLang's ``import_model_classes`` asserts against it) is listed once, from the first
    module. A module that does not parse contributes nothing (SGLang could not import it either). With
    ``mentioning``, only the modules whose text contains that word are parsed (``doctor`` looking for one name: a
    class a module registers is named in its text unless it comes through another module's alias, so a caller
    that does not find the name this way walks them all).
    """
    out: dict[str, Entry] = {}
    for module in model_modules(package):
        if mentioning is not None and not _mentions(package, module, mentioning):
            continue
        tree = package.tree(module)
        if tree is None:
            continue
        for element in _entry_values(tree):
            cls = package.expression(module, element)
            name = cls.name if cls is not None else ast.unparse(element)
            out.setdefault(name, Entry(name, module, cls))
    return tuple(out.values())


def _mentions(package: Package, module: str, word: str) -> bool:
    path = package.path(module)
    try:
        return path is not None and word.encode() in path.read_bytes()
    except OSError:
        return False


def not_generative(package: Package, config: tuple[str, ...], function: str) -> frozenset[str]:
    """The architecture names SGLang's ``function`` (``is_generation_model``) in the file ``config`` (below the
    package folder: ``srt/configs/model_config.py``) tests with ``"X" in ...`` before ``return False``: the
    architectures it serves as embedding, reward or classification models. Empty when the file or function is gone."""
    path = package.root.joinpath(package.package, *config)
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return frozenset(
                c.left.value
                for c in ast.walk(node)
                if isinstance(c, ast.Compare)
                and isinstance(c.left, ast.Constant)
                and isinstance(c.left.value, str)
                and len(c.ops) == 1
                and isinstance(c.ops[0], ast.In)
            )
    return frozenset()


__all__ = ["Entry", "entries", "model_modules", "not_generative"]
