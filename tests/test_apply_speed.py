"""``apply``'s speed work (issue 11), on real release files: the cheap tree searches find exactly
what libcst's matchers find, edits give the bytes ``deep_replace`` gives, ``apply`` does not load
``libcst.matchers``, generates each changed file's code once, and still refuses a result that
would not parse."""

from __future__ import annotations

import subprocess
import sys

import libcst as cst
import pytest
from libcst import matchers as m

from patchkit import api
from patchkit.codemods import tree
from patchkit.vllm.release.install import from_site_packages
from patchkit.results import Outcome

FILES = [
    "vllm/v1/spec_decode/eagle.py",
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
]
"""The files ``apply`` changes on 0.17.1."""

STATEMENT_KINDS = [
    cst.If,
    cst.Assign,
    cst.AnnAssign,
    cst.Return,
    cst.For,
    cst.FunctionDef,
    cst.ClassDef,
    cst.SimpleStatementLine,
    cst.IndentedBlock,
    cst.Else,
    cst.ExceptHandler,
    cst.With,
    cst.Try,
]


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, cst.Module]:
    from vllm_release import fresh_copy

    sp = fresh_copy("0.17.1", tmp_path_factory.mktemp("speed") / "sp")
    return {f: cst.parse_module((sp / f).read_bytes()) for f in FILES}


@pytest.mark.release
@pytest.mark.parametrize("relpath", FILES)
def test_statement_walk_finds_what_matchers_find(modules, relpath):
    module = modules[relpath]
    walked = list(tree.statements(module))
    for kind in STATEMENT_KINDS:
        expected = m.findall(module, getattr(m, kind.__name__)())
        if kind in (cst.If, cst.Assign, cst.Return, cst.FunctionDef, cst.ClassDef):
            assert expected, f"{relpath} has no {kind.__name__}: the comparison would prove nothing"
        assert [n for n in walked if isinstance(n, kind)] == list(expected), kind.__name__  # source order too


@pytest.mark.release
@pytest.mark.parametrize("relpath", FILES)
def test_full_walk_finds_what_matchers_find(modules, relpath):
    module = modules[relpath]
    for kind in (cst.Name, cst.Call, cst.Attribute, cst.SimpleString, cst.Comparison):
        expected = list(m.findall(module, getattr(m, kind.__name__)()))
        assert expected
        found = tree.find(tree.walk(module), lambda n: isinstance(n, kind))
        assert len(found) == len(expected) and {id(n) for n in found} == {id(n) for n in expected}, kind.__name__


@pytest.mark.release
def test_replace_gives_the_bytes_deep_replace_gives(modules):
    module = modules["vllm/config/speculative.py"]
    lists = [n.value for n in tree.statements(module) if isinstance(n, cst.Assign) and isinstance(n.value, cst.List)]
    ifs = [n for n in tree.statements(module) if isinstance(n, cst.If)]
    assert lists and ifs
    for old in (lists[-1], ifs[len(ifs) // 2], ifs[-1]):
        new = (
            old.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            if isinstance(old, cst.List)
            else old.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment("# moved"))])
        )
        got = tree.replace(module, old, new)
        assert got.code != module.code
        assert got.code == module.deep_replace(old, new).code


@pytest.mark.release
def test_apply_does_not_import_libcst_matchers(release):
    sp = release("0.17.1")
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('MATCHERS ' + str('libcst.matchers' in sys.modules) + "
        "' LIBCST ' + str('libcst' in sys.modules) + '\\n'))\n"
        "sys.argv = ['patchkit', *sys.argv[1:]]\nfrom patchkit.ui.cli import main\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, "apply", "--site-packages", str(sp)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MATCHERS False LIBCST True" in proc.stderr


@pytest.mark.release
def test_each_changed_file_is_generated_once(release, monkeypatch):
    generated: list[int] = []
    real = cst.Module.bytes

    def counting(self):
        generated.append(id(self))
        return real.fget(self)

    monkeypatch.setattr(cst.Module, "bytes", property(counting))
    report = api.apply(from_site_packages(release("0.17.1")), dry_run=True)
    assert not report.refused
    assert sorted(f.path for f in report.files) == sorted(FILES)
    assert len(generated) == len(FILES)  # deepseek_v2.py gets two patches, one code generation


@pytest.mark.release
def test_a_result_that_would_not_parse_refuses_every_patch_of_that_file(release, monkeypatch):
    from patchkit.codemods.interface import AddEagle3Interface

    sp = release("0.17.1")
    before = {f: (sp / f).read_bytes() for f in FILES}
    real = AddEagle3Interface.transform

    def broken(self, module, site):
        out = real(self, module, site)
        return out.with_changes(body=[*out.body, cst.SimpleStatementLine([cst.Expr(cst.Name("class"))])])

    monkeypatch.setattr(AddEagle3Interface, "transform", broken)
    report = api.apply(from_site_packages(sp))
    assert report.refused and not report.written
    refused = {p.id: p.reason for p in report.patches if p.outcome is Outcome.REFUSED}
    unparsed = {"eagle3-deepseek-backbone", "eagle3-deepseek-interface", "eagle3-kimi-k25-interface"}
    assert set(refused) == unparsed | {"eagle3-kimi-k25-proposer"}  # it needs the Kimi interface
    assert all("would not parse" in refused[p] for p in unparsed)
    assert "eagle3-kimi-k25-interface" in refused["eagle3-kimi-k25-proposer"]
    assert {f: (sp / f).read_bytes() for f in FILES} == before


@pytest.mark.release
@pytest.mark.parametrize("enabled", [True, False])
def test_planning_pauses_the_garbage_collector_and_restores_it(release, monkeypatch, enabled):
    import gc

    from patchkit.codemods.capture import CaptureAuxHiddenStates

    seen: list[bool] = []
    real = CaptureAuxHiddenStates.transform

    def watching(self, module, site):
        seen.append(gc.isenabled())
        return real(self, module, site)

    monkeypatch.setattr(CaptureAuxHiddenStates, "transform", watching)
    (gc.enable if enabled else gc.disable)()
    try:
        report = api.apply(from_site_packages(release("0.17.1")), dry_run=True)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert not report.refused
    assert seen == [False]
