"""The legacy SGLang shape (issue 44): a wrapper without ``self.pp_group`` over a backbone that loops
``for i in range(len(self.layers))`` with ``hidden_states, residual = layer(...)`` (Granite, OLMoE, Xverse, DeepSeek).

On a list-append release (0.5.16) it is patched with Llama's own capture, and the setter of the release's own native
without pipeline parallelism (``gemma3_causal.py``, ``Gemma3ForCausalLM``: Llama's body without the guard); on the
capture-boundary release (0.5.23) it is refused, since no native there appends after a layer with the same residual
statements (never invented). Each release tree is a module-scoped hard-linked copy (patchkit replaces files, a new
inode, so the cache is never written); every round trip ends byte-exact over ``sglang/**/*.py``.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from patchkit.checks.sglang_verify import verify
from patchkit.plan import sglang_apply as a
from patchkit.plan.sglang_revert import revert
from sglang_release import pristine_site_packages

MODELS = "sglang/srt/models"
SAMPLE = [
    ("0.5.16", "GraniteForCausalLM", "granite"),
    ("0.5.16", "OlmoeForCausalLM", "olmoe"),
    ("0.5.16", "XverseForCausalLM", "xverse"),
    ("0.5.16", "DeepseekForCausalLM", "deepseek"),
]
"""Legacy classes of four files, each patchable on 0.5.16 (measured: docs/sglang.md)."""


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    made: dict[str, Path] = {}

    def site(version: str) -> Path:
        if version not in made:
            made[version] = tmp_path_factory.mktemp(version) / "site-packages"
            shutil.copytree(pristine_site_packages(version), made[version], copy_function=os.link)
        return made[version]

    return site


def _install(site: Path):
    from patchkit.sglang.install import from_site_packages

    return from_site_packages(site)


def _snapshot(site: Path) -> dict[str, str]:
    return {p.as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((site / "sglang").rglob("*.py"))}


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    (k,) = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == cls]
    (f,) = [s for s in k.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return f


def _loop_if(fn: ast.FunctionDef) -> str:
    (loop,) = [s for s in fn.body if isinstance(s, ast.For)]
    return ast.dump(loop.body[0])


@pytest.mark.release
def test_granite_on_0516_copies_llamas_capture_and_gemma3s_setter(sites):
    site = sites("0.5.16")
    before = _snapshot(site)
    install = _install(site)
    report = a.apply(install, ["GraniteForCausalLM"])
    assert int(report.exit_code) == 0 and report.written == (f"{MODELS}/granite.py",)
    patched = (site / MODELS / "granite.py").read_bytes()
    compile(patched, "granite.py", "exec")
    tree = ast.parse(patched)
    llama = ast.parse((site / MODELS / "llama.py").read_bytes())
    gemma3 = ast.parse((site / MODELS / "gemma3_causal.py").read_bytes())
    # the capture first in the loop: Llama's `if i in self.layers_to_capture: aux_hidden_states.append(h + residual)`
    assert _loop_if(_method(tree, "GraniteModel", "forward")) == _loop_if(_method(llama, "LlamaModel", "forward"))
    # the setter: the release's own native without pipeline parallelism, statement for statement
    setter = _method(tree, "GraniteForCausalLM", "set_eagle3_layers_to_capture")
    native = _method(gemma3, "Gemma3ForCausalLM", "set_eagle3_layers_to_capture")
    assert ast.dump(ast.Module(setter.body, [])) == ast.dump(ast.Module(native.body, []))
    assert "pp_group" not in ast.dump(setter)
    checked = verify(install)
    assert int(checked.exit_code) == 0 and [(v.architecture, v.ok) for v in checked.verdicts] == [
        ("GraniteForCausalLM", True)
    ]
    assert int(revert(install).exit_code) == 0
    assert _snapshot(site) == before


@pytest.mark.release
def test_granite_on_0523_is_refused_naming_the_natives_read(sites):
    site = sites("0.5.23")
    before = _snapshot(site)
    report = a.apply(_install(site), ["GraniteForCausalLM"])
    (outcome,) = report.outcomes
    assert outcome.status is a.Status.REFUSED and report.written == ()
    assert "range(len(self.layers))" in outcome.reason and "gemma3_causal.Gemma3TextModel" in outcome.reason
    assert outcome.reason.endswith("not invented")
    assert _snapshot(site) == before


@pytest.mark.release
@pytest.mark.parametrize("version, arch, module", SAMPLE, ids=lambda x: str(x))
def test_round_trip_is_byte_exact(sites, version, arch, module):
    site = sites(version)
    before = _snapshot(site)
    install = _install(site)
    report = a.apply(install, [arch])
    assert int(report.exit_code) == 0 and report.written == (f"{MODELS}/{module}.py",), report.to_dict()
    compile((site / MODELS / f"{module}.py").read_bytes(), module, "exec")
    assert int(verify(install).exit_code) == 0
    assert int(revert(install).exit_code) == 0
    assert _snapshot(site) == before
