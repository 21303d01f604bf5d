"""The ``model_type`` of an architecture's checkpoints, read from the serving environment, statically.

The EAGLE-3 start-up allow-list of vLLM 0.10.2 - 0.20.x matches ``hf_text_config.model_type``, which
a registry architecture name alone does not say. Two sources in the serving environment do, and
both are read with :mod:`ast` (neither is ever imported into patchkit's process):

- **its transformers** (the ``transformers/`` package next to ``vllm/``): the auto-model mappings of
  ``models/auto/modeling_auto.py`` (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and
  ``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``: model type -> class name) give the model types
  whose checkpoints name the class; ``CONFIG_MAPPING_NAMES`` (``models/auto/configuration_auto.py``
  in 4.x, ``models/auto/auto_mappings.py`` in 5.x) gives each one's config class, and that class's
  ``sub_configs`` (4.x) / ``sub_configs_defaults`` (5.x) ``"text_config"`` entry gives the text
  config, whose model type is what vLLM's ``hf_text_config`` reports (Gemma 3:
  ``Gemma3ForConditionalGeneration`` -> ``gemma3`` -> ``Gemma3TextConfig`` -> ``gemma3_text``).
  Checked against the wheels of transformers 4.57.6 and 5.20.2.
- **vLLM's own config registry** (``_CONFIG_REGISTRY`` in ``transformers_utils/config.py``,
  0.10.2 - 0.33.0: model type -> config class name): the model types whose config class the
  architecture's model module imports from ``vllm.transformers_utils.configs``. Used for text-only
  classes only (for a multimodal class the registry's type is the wrapper's, not the text config's).

:func:`lookup` answers with both and their agreement; a caller asks for ``--model`` only when they
disagree or neither knows.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from patchkit.vllm.release.source import ClassRef, SourceTree

TRANSFORMERS_PACKAGE = "transformers"
MODELING_AUTO = "models/auto/modeling_auto.py"
CONFIGURATION_AUTO = "models/auto/configuration_auto.py"
AUTO_MAPPINGS = "models/auto/auto_mappings.py"
"""transformers 5.x keeps ``CONFIG_MAPPING_NAMES`` and ``SPECIAL_MODEL_TYPE_TO_MODULE_NAME`` here."""
CLASS_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
"""The auto-model mappings whose classes vLLM serves as generative models."""
CONFIG_MAPPING = "CONFIG_MAPPING_NAMES"
MODULE_NAMES = "SPECIAL_MODEL_TYPE_TO_MODULE_NAME"
TEXT_CONFIG = "text_config"
VLLM_CONFIG_MODULE = "vllm.transformers_utils.config"
"""Module holding vLLM's own ``_CONFIG_REGISTRY`` (model type -> config class)."""
VLLM_CONFIG_REGISTRY = "_CONFIG_REGISTRY"
"""vLLM's config registry: a ``LazyConfigDict(model_type="ConfigClass", ...)`` in 0.10.2 - 0.33.0
(a dict of classes in 0.9.2). ``kimi_k2`` enters it in 0.18.0 (``DeepseekV3Config``)."""
VLLM_CONFIGS_PACKAGE = "vllm.transformers_utils.configs"


@dataclass(frozen=True)
class Source:
    """What one source says about an architecture.

    Attributes:
        name: ``"transformers X.Y.Z"`` or ``"vLLM's config registry"``.
        location: the file read (``path`` or ``path:line``).
        types: the text model types it gives (empty: it says nothing).
    """

    name: str
    location: str
    types: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """The model types of one architecture's checkpoints, and where they come from.

    Attributes:
        architecture: the registry name asked about.
        types: the model types to admit (empty when the sources disagree or say nothing).
        sources: every source consulted (an absent transformers is not listed).
        conflict: True when two sources name disjoint model types.
    """

    architecture: str
    types: tuple[str, ...]
    sources: tuple[Source, ...]
    conflict: bool

    def reason(self) -> str:
        """One sentence: what was consulted and what it said."""
        said = [f"{s.name} ({s.location}) says {', '.join(s.types)}" for s in self.sources if s.types]
        silent = [f"{s.name} ({s.location})" for s in self.sources if not s.types]
        parts = said + (
            [f"{' and '.join(silent)} {'names' if len(silent) == 1 else 'name'} no model type for it"] if silent else []
        )
        if not self.sources:
            return "no transformers next to vllm/ and no vLLM config registry to read"
        return ("; ".join(parts) + (": they disagree" if self.conflict else "")) if parts else ""


def lookup(tree: SourceTree, cls: ClassRef | None, architecture: str, multimodal: bool) -> Answer:
    """The text model types of ``architecture``'s checkpoints, from the environment's transformers and vLLM.

    Args:
        tree: the install's sources (its ``site_packages`` is where ``transformers/`` is looked for).
        cls: the architecture's resolved vLLM class (None: not resolved; vLLM's registry is not asked).
        architecture: the registry name (a checkpoint's ``architectures`` entry).
        multimodal: the class derives from ``SupportsMultiModal`` (vLLM's config registry is then not used).
    Returns:
        An :class:`Answer`: ``types`` is the union of what the sources say when they overlap, the one
        source's when only one says anything, and empty when they disagree or say nothing.
    Raises:
        SourceError: a vLLM file on the way does not parse (transformers files that do not parse
            are treated as saying nothing).
    """
    sources: list[Source] = []
    root = tree.site_packages / TRANSFORMERS_PACKAGE
    config_types: dict[str, str] = {}
    if (root / MODELING_AUTO).is_file():
        version = _version(tree.site_packages)
        types, config_types = _transformers_types(str(root), _stamp(root), architecture)
        sources.append(
            Source(f"transformers {version}" if version else "transformers", str(root / MODELING_AUTO), types)
        )
    else:
        sources.append(Source("transformers", f"none in {tree.site_packages}", ()))
    relpath = tree.relpath_of_module(VLLM_CONFIG_MODULE)
    if relpath is not None and cls is not None:
        found, where = _vllm_types(tree, cls, config_types)
        sources.append(Source("vLLM's config registry", where or relpath, () if multimodal else found))
    said = [set(s.types) for s in sources if s.types]
    conflict = len(said) > 1 and not set.intersection(*said)
    types = () if conflict or not said else tuple(sorted(set().union(*said)))
    return Answer(architecture, types, tuple(sources), conflict)


def _stamp(root: Path) -> tuple[int, int]:
    """Cache key of the transformers files: ``modeling_auto.py``'s modification time (ns) and size."""
    try:
        st = (root / MODELING_AUTO).stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return 0, 0


def _version(site_packages: Path) -> str | None:
    """The transformers version from its ``.dist-info`` folder name (``transformers-4.57.6.dist-info``)."""
    for entry in sorted(site_packages.glob("transformers-*.dist-info")):
        return entry.name[len("transformers-") : -len(".dist-info")]
    return None


def _parse(file: Path) -> ast.Module | None:
    try:
        return ast.parse(file.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


Value = str | tuple[str, ...] | None
"""A mapping literal's value: a string, a tuple of strings, or None for any other expression."""


@dataclass(frozen=True)
class Mapping:
    """One module-level mapping literal (``NAME = {...}`` and the like), as read by :func:`literal_mappings`.

    Attributes:
        lineno: line of the assignment.
        entries: ``(key, value)`` in source order; keys are strings, values are :data:`Value`.
    """

    lineno: int
    entries: tuple[tuple[str, Value], ...]


def literal_mappings(module: ast.Module | None, names: tuple[str, ...]) -> dict[str, Mapping]:
    """The first module-level assignment of each of ``names`` whose value is a mapping literal.

    One reader for the tables of both sources, which share a shape:

    - ``{key: value, ...}`` (transformers' 4.x/5.x tables; vLLM 0.9.2's ``_CONFIG_REGISTRY``);
    - a call whose arguments carry the pairs: a list or tuple of ``(key, value)`` tuples
      (transformers' ``OrderedDict([...])``), a dict, or keywords (vLLM 0.10.2 - 0.33.0's
      ``_CONFIG_REGISTRY = LazyConfigDict(model_type="ConfigClass", ...)``).

    Keys that are not string literals are skipped; a value that is neither a string nor a list or
    tuple of strings is kept as None (the key is still a key). An assignment of another form is
    passed over (a later one may still count).
    """
    out: dict[str, Mapping] = {}
    if module is None:
        return out
    for node in module.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
        name = next((t.id for t in targets if isinstance(t, ast.Name) and t.id in names), None)
        if name is None or name in out:
            continue
        entries = _entries(node.value)
        if entries is not None:
            out[name] = Mapping(node.lineno, entries)
    return out


def _entries(value: ast.expr) -> tuple[tuple[str, Value], ...] | None:
    """The ``(key, value)`` pairs of a mapping literal, or None when ``value`` is not one."""
    items: list[tuple[ast.expr, ast.expr]] = []
    if isinstance(value, ast.Dict):
        items = [(k, v) for k, v in zip(value.keys, value.values) if k is not None]
    elif isinstance(value, ast.Call):
        literal = False
        for arg in value.args:
            if isinstance(arg, ast.Dict):
                literal = True
                items += [(k, v) for k, v in zip(arg.keys, arg.values) if k is not None]
            elif isinstance(arg, (ast.List, ast.Tuple)):
                literal = True
                items += [(e.elts[0], e.elts[1]) for e in arg.elts if isinstance(e, ast.Tuple) and len(e.elts) == 2]
        keywords = [(ast.Constant(k.arg), k.value) for k in value.keywords if k.arg]
        if not literal and not value.keywords:
            return None
        items += keywords
    else:
        return None
    return tuple((k.value, _value(v)) for k, v in items if isinstance(k, ast.Constant) and isinstance(k.value, str))


def _value(node: ast.expr) -> Value:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


def _mappings(module: ast.Module | None, names: tuple[str, ...]) -> dict[str, list[tuple[str, str | tuple[str, ...]]]]:
    """transformers' tables among ``names``: their entries with a string or string-tuple value."""
    return {
        name: [(k, v) for k, v in found.entries if v is not None]
        for name, found in literal_mappings(module, names).items()
    }


def config_registry(tree: SourceTree) -> tuple[tuple[tuple[str, Value], ...], str | None]:
    """vLLM's own config registry (:data:`VLLM_CONFIG_REGISTRY`): its entries and ``file:line``.

    Returns:
        ``(entries, location)``: ``(model type, config class name or None)`` in source order (a
        class given as a name, as 0.9.2 writes it, is None), and ``file:line`` of the assignment;
        ``((), None)`` when the release has no such module or assignment.
    Raises:
        SourceError: the module does not parse.
    """
    relpath = tree.relpath_of_module(VLLM_CONFIG_MODULE)
    if relpath is None:
        return (), None
    found = literal_mappings(tree.module_tree(VLLM_CONFIG_MODULE), (VLLM_CONFIG_REGISTRY,)).get(VLLM_CONFIG_REGISTRY)
    if found is None:
        return (), None
    return found.entries, f"{relpath}:{found.lineno}"


def _transformers_types(
    root_text: str, stamp: tuple[int, int], architecture: str
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The text model types transformers at ``root_text`` gives ``architecture``, and its config class ->
    model type map (``stamp``: the cache key)."""
    root = Path(root_text)
    classes, config_of, type_of, module_of = _auto_tables(root_text, stamp)
    types = [
        t
        for name in CLASS_MAPPINGS
        for t, v in classes.get(name, ())
        if architecture == v or (isinstance(v, tuple) and architecture in v)
    ]
    out: list[str] = []
    for t in dict.fromkeys(types):
        text = _text_type(root, t, config_of, type_of, module_of)
        if text is None:  # a text config the checkpoint chooses (AutoConfig): transformers cannot say
            return (), type_of
        if text not in out:
            out.append(text)
    return tuple(out), type_of


@lru_cache(maxsize=8)
def _auto_tables(root_text: str, stamp: tuple[int, int]):
    """transformers' auto tables at ``root_text``: the class mappings, config of type, type of config,
    module of type (parsed once per file version)."""
    root = Path(root_text)
    classes = _mappings(_parse(root / MODELING_AUTO), CLASS_MAPPINGS)
    configs_file = root / AUTO_MAPPINGS if (root / AUTO_MAPPINGS).is_file() else root / CONFIGURATION_AUTO
    found = _mappings(_parse(configs_file), (CONFIG_MAPPING, MODULE_NAMES))
    if (root / AUTO_MAPPINGS).is_file() and CONFIG_MAPPING not in found:
        found.update(_mappings(_parse(root / CONFIGURATION_AUTO), (CONFIG_MAPPING, MODULE_NAMES)))
    config_of = {t: c for t, c in found.get(CONFIG_MAPPING, ()) if isinstance(c, str)}
    type_of = {c: t for t, c in reversed(list(config_of.items()))}
    module_of = {t: m for t, m in found.get(MODULE_NAMES, ()) if isinstance(m, str)}
    return classes, config_of, type_of, module_of


def _text_type(
    root: Path, model_type: str, config_of: dict[str, str], type_of: dict[str, str], module_of: dict[str, str]
) -> str | None:
    """``model_type``'s text config type: its config class's ``text_config`` sub-config's, else itself;
    None when that sub-config is ``AutoConfig`` (the checkpoint decides)."""
    config = config_of.get(model_type)
    if config is None:
        return model_type
    module = module_of.get(model_type, model_type.replace("-", "_"))
    tree = _parse(root / "models" / module / f"configuration_{module}.py")
    cls = next((n for n in (tree.body if tree else ()) if isinstance(n, ast.ClassDef) and n.name == config), None)
    if cls is None:
        return model_type
    for stmt in cls.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else stmt.targets
        if not any(isinstance(t, ast.Name) and t.id in ("sub_configs", "sub_configs_defaults") for t in targets):
            continue
        if not isinstance(stmt.value, ast.Dict):
            continue
        for key, value in zip(stmt.value.keys, stmt.value.values):
            if not (isinstance(key, ast.Constant) and key.value == TEXT_CONFIG):
                continue
            if isinstance(value, ast.Call):  # 5.x: SubConfigSpec(config_class=Gemma3TextConfig)
                value = next((k.value for k in value.keywords if k.arg == "config_class"), None)
            name = value.id if isinstance(value, ast.Name) else None
            if name is None or name == "AutoConfig":
                return None
            return type_of.get(name)
    return model_type


def _vllm_types(
    tree: SourceTree, cls: ClassRef, transformers_types: dict[str, str]
) -> tuple[tuple[str, ...], str | None]:
    """The model types of the config classes ``cls``'s own code names (its MRO's class bodies):
    a class of vLLM's ``_CONFIG_REGISTRY`` gives its key; a config class its module imports from
    ``transformers`` gives that class's model type in ``transformers_types`` (config class -> type).
    Without ``transformers_types`` (no transformers next to vLLM), a class that names anything
    imported from transformers gets no answer: the part transformers would give is unknown."""
    registry, where = config_registry(tree)
    entries = [(t, c) for t, c in registry if isinstance(c, str)]
    named: set[str] = set()
    from_transformers: set[str] = set()
    for klass in tree.mro(cls):
        if not klass.module.startswith("vllm."):
            continue
        named |= {n.id for n in ast.walk(tree.class_node(klass)) if isinstance(n, ast.Name)}
        for node in tree.module_tree(klass.module).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == TRANSFORMERS_PACKAGE:
                from_transformers |= {a.asname or a.name for a in node.names}
    found = [t for t, c in entries if c in named]
    found += [transformers_types[c] for c in sorted(named & from_transformers) if c in transformers_types]
    if not transformers_types and named & from_transformers:
        # it also names classes from transformers (Olmo2ForCausalLM: transformers' Olmo2Config besides
        # vLLM's Olmo3Config), and no transformers here says which model types those are: partial
        return (), where
    return tuple(dict.fromkeys(found)), where


__all__ = [
    "Answer",
    "Mapping",
    "Source",
    "VLLM_CONFIG_MODULE",
    "VLLM_CONFIG_REGISTRY",
    "config_registry",
    "literal_mappings",
    "lookup",
]
