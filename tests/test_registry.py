"""The static registry reader and name resolution, on small packages we write ourselves."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from patchkit.errors import SourceError
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree


def write(root: Path, files: dict[str, str]) -> SourceTree:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return SourceTree(root)


REGISTRY = """
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
"""

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
    assert set(registry.entries) == {
        "AForCausalLM",
        "AliasOfA",
        "BForCausalLM",
        "AModel",
        "CForCausalLM",
        "SmolLM3ForCausalLM",
    }
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


def _dict_names(registry_py: Path) -> tuple[dict[str, set[str]], set[str]]:
    """Every module-level ``_..._MODELS`` dict literal of a real ``registry.py`` and its names, read here
    with :mod:`ast` alone (constant keys, and ``**OTHER`` or ``**{...}`` spreads), and the dicts only
    partly read (a spread comprehension: the test asserts that no target dict is one)."""
    module = ast.parse(registry_py.read_text())
    literals = {
        s.targets[0].id: s.value
        for s in module.body
        if isinstance(s, ast.Assign)
        and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id.endswith("_MODELS")
        and isinstance(s.value, ast.Dict)
    }
    out: dict[str, set[str]] = {}
    partial: set[str] = set()

    def names(node: ast.Dict) -> tuple[set[str], bool]:
        found: set[str] = set()
        whole = True
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.add(key.value)
            elif key is None and isinstance(value, ast.Name) and value.id in out:
                found |= out[value.id]
                whole = whole and value.id not in partial
            elif key is None and isinstance(value, ast.Dict):
                inner, inner_whole = names(value)
                found, whole = found | inner, whole and inner_whole
            else:
                whole = False
        return found, whole

    for name, node in literals.items():
        out[name], whole = names(node)
        if not whole:
            partial.add(name)
    return {name: rows for name, rows in out.items()}, partial


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_scan_lists_every_target_architecture_once_whichever_dicts_hold_it(version):
    """0.33.0 and 0.34.0 register LlavaNext, Phi3V and Qwen2VL both as embedding and as multimodal
    models; scan used to file them under the embedding dict and drop them."""
    import json
    from collections import Counter

    from typer.testing import CliRunner

    from patchkit.ui.cli import app
    from patchkit.vllm.registry.table import TARGET_GROUPS
    from vllm_release import pristine_site_packages

    sp = pristine_site_packages(version)
    registry_py = sp / "vllm/model_executor/models/registry.py"
    dicts, partial = _dict_names(registry_py)
    assigned = {
        t.id
        for s in ast.parse(registry_py.read_text()).body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Name)
    }
    targets = [g for g in TARGET_GROUPS if g in assigned]
    assert all(g in dicts and g not in partial for g in targets), "a target dict this test cannot read"
    assert "_TEXT_GENERATION_MODELS" in targets and "_MULTIMODAL_MODELS" in targets
    expected = set().union(*(dicts[g] for g in targets))
    elsewhere = set().union(*(rows for g, rows in dicts.items() if g not in TARGET_GROUPS and g != "_VLLM_MODELS"))
    assert expected & elsewhere, "the release registers no target also under another dict: nothing to test"
    result = CliRunner().invoke(app, ["scan", "--site-packages", str(sp), "--json"])
    assert result.exit_code == 0, result.output
    listed = Counter(row["architecture"] for row in json.loads(result.stdout)["architectures"])
    assert {name: n for name, n in listed.items() if n != 1} == {}
    assert set(listed) == expected
