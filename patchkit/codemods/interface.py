"""Give a model class the A1 ``SupportsEagle3`` interface: import, base class and two methods.

Fact (vLLM 0.10.2 - 0.17.1, ``model_executor/models/interfaces.py``): ``SupportsEagle3`` is a
``runtime_checkable`` Protocol whose methods ``set_aux_hidden_state_layers`` and
``get_eagle3_aux_hidden_state_layers`` are stubs returning None, so both must be overridden.
The method bodies depend on what the class holds (see :class:`~patchkit.codemods.base.Holder`):

- a backbone (``DeepseekV2ForCausalLM.model`` is a ``DeepseekV2Model``): set the backbone's
  ``aux_hidden_state_layers``; default ids ``(2, n // 2, n - 3)`` with ``n = len(layers)``;
- a causal LM (``KimiK25ForConditionalGeneration.language_model`` on 0.16/0.17): forward both
  calls to it.
"""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node

from patchkit.codemods.base import (
    Codemod,
    Presence,
    Refusal,
    Site,
    exactly_one,
    insert_into_sequence,
    method_of,
    parse_members,
    replace_top_level,
    top_level_class,
)
from patchkit.codemods.kinds import CodemodKind

from patchkit.vllm.release.contract import GETTER_A1 as GETTER
from patchkit.vllm.release.contract import INTERFACES_MODULE, PROTOCOL, SETTER

_BACKBONE_METHODS = """
def {setter}(self, layers: tuple[int, ...]) -> None:
    # Added by patchkit ({patch_id}): the backbone in self.{attr} captures these layers.
    self.{attr}.aux_hidden_state_layers = layers

def {getter}(self) -> tuple[int, ...]:
    # Added by patchkit ({patch_id}): vLLM's default EAGLE-3 layer ids.
    num_layers = len(self.{attr}.layers)
    return (2, num_layers // 2, num_layers - 3)
"""

_FORWARDING_METHODS = """
def {setter}(self, layers: tuple[int, ...]) -> None:
    # Added by patchkit ({patch_id}): forward to the language model in self.{attr}.
    self.{attr}.{setter}(layers)

def {getter}(self) -> tuple[int, ...]:
    # Added by patchkit ({patch_id}): forward to the language model in self.{attr}.
    return self.{attr}.{getter}()
"""


class AddEagle3Interface(Codemod):
    """Add ``SupportsEagle3`` to a class's bases and imports, and define its two methods.

    Args:
        patch_id: written into a comment in each added method, so a reader of the file sees
            who added it.
        getter: the getter's name: ``get_eagle3_aux_hidden_state_layers`` (A1) or, for a wrapper
            that must forward on 0.18.0 on, ``get_eagle3_default_aux_hidden_state_layers``.
        methods: write the two A1 methods (vLLM 0.10.2 - 0.17.1, whose Protocol methods are
            stubs); False from 0.18.0, where the Protocol's default methods find the backbone
            through ``get_language_model()`` / ``language_model`` and ``.model``.
    """

    kind = CodemodKind.INTERFACE

    def __init__(self, patch_id: str, methods: bool = True, getter: str = GETTER) -> None:
        self.patch_id = patch_id
        self.methods = methods
        self.getter = getter
        self.options = {"patch_id": patch_id, "methods": methods, "getter": getter}

    # -- check ------------------------------------------------------------------------

    def check(self, module: cst.Module, site: Site) -> tuple[Presence, str]:
        cls = top_level_class(module, _class_name(site))
        # The import alone is no part of the change: another class of the module may use it.
        parts = {"base": _has_base(cls)}
        if self.methods:
            parts[SETTER] = bool(method_of(cls, SETTER))
            parts[self.getter] = bool(method_of(cls, self.getter))
        if all(parts.values()):
            return Presence.PRESENT, f"{cls.name.value} has {PROTOCOL} and both methods"
        if self.methods and not parts["base"] and all(v for k, v in parts.items() if k != "base"):
            return Presence.ABSENT, f"{cls.name.value} defines both methods but lacks the {PROTOCOL} base"
        if not any(parts.values()):
            return Presence.ABSENT, f"{cls.name.value} lacks {PROTOCOL}"
        have = ", ".join(k for k, v in parts.items() if v)
        lack = ", ".join(k for k, v in parts.items() if not v)
        return Presence.PARTIAL, f"{cls.name.value} has {have} but not {lack}"

    # -- transform --------------------------------------------------------------------

    def transform(self, module: cst.Module, site: Site) -> cst.Module:
        if self.methods and site.holder is None:
            raise Refusal(f"no resolved holder for {site.class_name}: cannot tell what its methods forward to")
        module = add_interfaces_import(module, site, PROTOCOL)
        cls = top_level_class(module, _class_name(site))
        new_cls = _add_base(cls)
        if self.methods and not (method_of(cls, SETTER) and method_of(cls, self.getter)):
            new_cls = self._add_methods(new_cls, site)
        return replace_top_level(module, cls, new_cls)

    def _add_methods(self, cls: cst.ClassDef, site: Site) -> cst.ClassDef:
        holder = site.holder
        assert holder is not None
        template = _BACKBONE_METHODS if holder.kind == "backbone" else _FORWARDING_METHODS
        code = template.format(setter=SETTER, getter=self.getter, attr=holder.attr, patch_id=self.patch_id)
        new_members = parse_members(code.lstrip("\n"))
        new_members = [
            s.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) if isinstance(s, cst.FunctionDef) else s
            for s in new_members
        ]
        body = list(cls.body.body)
        inits = [i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
        if len(inits) > 1:
            raise Refusal(f"expected at most 1 __init__ in class {cls.name.value}, found {len(inits)}")
        at = inits[0] + 1 if inits else len(body)
        body[at:at] = new_members
        return cls.with_changes(body=cls.body.with_changes(body=body))


def _class_name(site: Site) -> str:
    if not site.class_name:
        raise Refusal("interface patch without a target class")
    return site.class_name


def _interfaces_import_matches(node: cst.ImportFrom, site: Site) -> bool:
    if node.module is None and not node.relative:
        return False
    dotted = get_full_name_for_node(node.module) if node.module is not None else ""
    level = len(node.relative)
    if level == 0:
        return dotted == INTERFACES_MODULE
    package = site.module.split(".")
    package = package[: len(package) - level]
    absolute = ".".join(package + ([dotted] if dotted else []))
    return absolute == INTERFACES_MODULE


def _interfaces_imports(module: cst.Module, site: Site) -> list[cst.ImportFrom]:
    found = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and _interfaces_import_matches(small, site):
                    found.append(small)
    return found


def _imported_names(module: cst.Module, site: Site) -> set[str]:
    names: set[str] = set()
    for node in _interfaces_imports(module, site):
        if isinstance(node.names, cst.ImportStar):
            continue
        names.update(alias.evaluated_alias or alias.evaluated_name for alias in node.names)
    return names


def add_interfaces_import(module: cst.Module, site: Site, name: str) -> cst.Module:
    """Add ``name`` to the module's one ``from ... import`` of the interfaces module (sorted in).

    Raises:
        Refusal: no such import, several, or a ``*`` import.
    """
    if name in _imported_names(module, site):
        return module
    found = _interfaces_imports(module, site)
    if not found:
        return _new_import(module, name)
    node = exactly_one(found, f"module-level 'from ... import' of {INTERFACES_MODULE}")
    if isinstance(node.names, cst.ImportStar):
        raise Refusal(f"{INTERFACES_MODULE} is imported with '*'")
    names = list(node.names)
    at = next((i for i, a in enumerate(names) if a.evaluated_name > name), len(names))
    new_names = insert_into_sequence(names, at, cst.ImportAlias(name=cst.Name(name)))
    return replace_top_level(module, node, node.with_changes(names=new_names))


def _new_import(module: cst.Module, name: str) -> cst.Module:
    """Add ``from vllm.model_executor.models.interfaces import name`` after the last module-level import."""
    body = list(module.body)
    last = max(
        (
            i
            for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine)
            and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)
        ),
        default=None,
    )
    if last is None:
        raise Refusal(f"no module-level import to place 'from {INTERFACES_MODULE} import {name}' after")
    body.insert(last + 1, cst.parse_statement(f"from {INTERFACES_MODULE} import {name}\n"))
    return module.with_changes(body=body)


def _has_base(cls: cst.ClassDef) -> bool:
    return any(isinstance(arg.value, cst.Name) and arg.value.value == PROTOCOL for arg in cls.bases)


def _add_base(cls: cst.ClassDef) -> cst.ClassDef:
    if _has_base(cls):
        return cls
    if not cls.bases:
        raise Refusal(f"class {cls.name.value} has no bases to extend")
    return cls.with_changes(bases=insert_into_sequence(cls.bases, len(cls.bases), cst.Arg(value=cst.Name(PROTOCOL))))
