"""The static registry reader and name resolution, on small packages we write ourselves."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from patchkit.errors import SourceError
from patchkit.vllm.registry import Registry
from patchkit.vllm.source import SourceTree


def write(root: Path, files: dict[str, str]) -> SourceTree:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return SourceTree(root)


REGISTRY = '''
_TEXT = {
    "AForCausalLM": ("a_model", "AForCausalLM"),
    "AliasOfA": ("a_model", "AForCausalLM"),
    "BForCausalLM": ("b_model", "BForCausalLM"),
}
_EMBED = {
    "AModel": ("a_model", "AForCausalLM"),
    **{k: (mod, arch) for k, (mod, arch) in _TEXT.items() if arch == "AForCausalLM"},
}
_ABSOLUTE = {"CForCausalLM": ("vllm.models.c", "CForCausalLM")}
_BACKEND = {"SmolLM3ForCausalLM": ("transformers", "TransformersForCausalLM")}
_VLLM_MODELS = {**_TEXT, **_EMBED, **_ABSOLUTE, **_BACKEND}
'''

MODELS = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/registry.py": REGISTRY,
    "vllm/model_executor/models/interfaces.py": "class SupportsPP:\n    pass\n",
    "vllm/model_executor/models/a_model.py": """
        from torch import nn
        from .interfaces import SupportsPP
        from vllm.model_executor.models import interfaces as ifaces

        class Base(nn.Module, ifaces.SupportsPP):
            pass

        class AForCausalLM(Base, SupportsPP):
            pass
        """,
    "vllm/model_executor/models/b_model.py": "from .a_model import AForCausalLM as BForCausalLM\n",
    "vllm/models/__init__.py": "",
    "vllm/models/c/__init__.py": "from .impl import CForCausalLM\n",
    "vllm/models/c/impl.py": "class CForCausalLM:\n    pass\n",
}


def test_rows_spreads_comprehension_and_aliases(tmp_path):
    registry = Registry(write(tmp_path, MODELS))
    assert set(registry.entries) == {"AForCausalLM", "AliasOfA", "BForCausalLM", "AModel", "CForCausalLM", "SmolLM3ForCausalLM"}
    a = registry.resolve("AModel")
    assert a.cls.relpath == "vllm/model_executor/models/a_model.py" and a.cls.name == "AForCausalLM"
    # B re-exports A under another name: it resolves to the same class, but is not listed among the
    # aliases (finding such rows would mean parsing every model file of the registry)
    assert registry.resolve("BForCausalLM").cls == a.cls
    assert a.aliases == ("AForCausalLM", "AModel", "AliasOfA")


def test_absolute_module_package_and_transformers_backend(tmp_path):
    registry = Registry(write(tmp_path, MODELS))
    c = registry.resolve("CForCausalLM")
    assert c.entry.module == "vllm.models.c" and c.cls.relpath == "vllm/models/c/impl.py"
    smol = registry.resolve("SmolLM3ForCausalLM")
    assert smol.transformers_backend and smol.cls is None
    assert registry.resolve("KimiK2ForCausalLM") is None


def test_bases_through_relative_and_module_alias_imports(tmp_path):
    tree = write(tmp_path, MODELS)
    cls = Registry(tree).resolve("AForCausalLM").cls
    base, protocol = tree.bases(cls)
    assert base.name == "Base" and protocol.relpath == "vllm/model_executor/models/interfaces.py"
    assert [c.name for c in tree.mro(cls)] == ["AForCausalLM", "Base", "SupportsPP"]
    assert tree.bases(base)[0] == "nn.Module"  # torch's class is named, not resolved


def test_unreadable_registry_shape_is_a_clear_error(tmp_path):
    files = dict(MODELS)
    files["vllm/model_executor/models/registry.py"] = "_X = {'A': make()}\n_VLLM_MODELS = {**_X}\n"
    with pytest.raises(SourceError, match="no _VLLM_MODELS dict patchkit can read .*spread of unknown name _X"):
        Registry(write(tmp_path, files))
