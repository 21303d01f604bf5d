"""SGLang's wing (issue 44, its first step): SGLang found without importing it, its ``EntryClass`` registry read
statically, each architecture classified, ``scan --target sglang``, and every other command refusing the target.

Offline tests build a small synthetic ``sglang`` package (each rule of ``patchkit/sglang/states.py`` once, and
the name resolutions of ``patchkit/sglang/classes.py``); the ``release`` tests read the real wheels of 0.5.14,
0.5.16 and 0.5.23 (``tests/sglang_release.py``) and pin what scan reports on each.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.errors import InstallNotFound
from patchkit.sglang.classes import Package
from patchkit.sglang.registry import entries
from patchkit.sglang.states import State
from sglang_release import SGLANG_RELEASES, pristine_site_packages

MODELS = {
    "base.py": (
        "import torch.nn as nn\n"
        "class BaseModel(nn.Module):\n"
        "    def forward(self, x, forward_batch):\n"
        "        aux_hidden_states = []\n"
        "        for i in range(3):\n"
        "            if i in self.layers_to_capture:\n"
        "                aux_hidden_states.append(x)\n"
        "class BaseForCausalLM(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.model = BaseModel()\n"
        "        self.logits_processor = LogitsProcessor()\n"
        "    def get_embed_and_head(self):\n"
        "        pass\n"
        "    def set_eagle3_layers_to_capture(self, ids=None):\n"
        "        self.capture_aux_hidden_states = True\n"
        "EntryClass = BaseForCausalLM\n"
    ),
    # an alias of a subclass of an imported class: registered under the class's own __name__
    "aliased.py": (
        "from sglang.srt.models.base import BaseForCausalLM as B\n"
        "class AForCausalLM(B):\n    pass\n"
        "Alias = AForCausalLM\n"
        "EntryClass = [Alias]\n"
    ),
    # a class that builds the native class's inner model: it is missing, and its sibling captures by list append
    "missing.py": (
        "from . import base as b\n"
        "class MForCausalLM(object):\n"
        "    def __init__(self):\n"
        "        self.model = b.BaseModel()\n"
        "        self.logits_processor = 1\n"
        "class LoneForCausalLM(object):\n"
        "    def __init__(self):\n"
        "        self.logits_processor = 1\n"
        "EntryClass = [MForCausalLM, LoneForCausalLM]\n"
    ),
    "pooling.py": (
        "class EmbedModel(object):\n"
        "    def __init__(self):\n"
        "        self.logits_processor = None\n"
        "        self.pooler = Pooler()\n"
        "class Listed(object):\n    pass\n"
        "EntryClass = [EmbedModel, Listed]\n"
    ),
    "drafts.py": (
        "from sglang.srt.models.base import *\n"
        "class Inner(object):\n"
        "    def forward(self, forward_batch):\n"
        "        return forward_batch.spec_info.hidden_states\n"
        "class NextN(BaseForCausalLM):\n"
        "    def __init__(self):\n"
        "        self.model = Inner()\n"
        "class Flash(object):\n"
        "    def project_target_hidden(self, h):\n        return h\n"
        "EntryClass = [NextN, Flash]\n"
    ),
    "unread.py": "EntryClass = [make_class()]\n",
    "zagain.py": "from sglang.srt.models.base import BaseForCausalLM\nEntryClass = BaseForCausalLM\n",
    "sub/__init__.py": "class SubForCausalLM(object):\n    pass\nEntryClass = SubForCausalLM\n",
}
CONFIG = (
    "def is_generation_model(model_architectures, is_embedding=False):\n"
    '    if "Listed" in model_architectures or "Other" in model_architectures:\n'
    "        return False\n"
    "    return not is_embedding\n"
)
WANT = [
    ("AForCausalLM", State.NATIVE, ("list append",)),
    ("BaseForCausalLM", State.NATIVE, ("list append",)),
    ("NextN", State.DRAFT, ()),
    ("Flash", State.DRAFT, ()),
    ("MForCausalLM", State.MISSING, ("list append",)),
    ("LoneForCausalLM", State.MISSING, ()),
    ("EmbedModel", State.NOT_GENERATIVE, ()),
    ("Listed", State.NOT_GENERATIVE, ()),
    ("make_class()", State.UNREAD, ()),
]
"""The synthetic package's scan, in SGLang's order (module names sorted; ``zagain.py`` registers BaseForCausalLM a
second time and adds nothing; ``sub/`` is a sub-package, which SGLang's walk skips)."""


def fake_sglang(root: Path, version: str = "0.0.1") -> Path:
    """A site-packages folder with a synthetic ``sglang`` distribution (:data:`MODELS`, :data:`CONFIG`)."""
    site = root / "site-packages"
    models = site / "sglang" / "srt" / "models"
    for name, code in {**MODELS, "__init__.py": ""}.items():
        (models / name).parent.mkdir(parents=True, exist_ok=True)
        (models / name).write_text(code)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "configs").mkdir()
    (site / "sglang" / "srt" / "configs" / "model_config.py").write_text(CONFIG)
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\n")
    (dist / "top_level.txt").write_text("sglang\n")
    return site


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def venv_with(site: Path, where: Path) -> Path:
    """A venv (no pip, no dependencies) whose import path holds ``site`` through a ``.pth`` file: enough for
    ``--python``, since patchkit never imports the target."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "sglang_under_test.pth").write_text(f"{site}\n")
    return python


# -- offline: the synthetic package ----------------------------------------------------------------


def test_each_rule_on_a_synthetic_release(tmp_path):
    report = api.scan_sglang(site_packages=fake_sglang(tmp_path))
    assert [(r.architecture, r.state, r.idioms) for r in report.rows] == WANT
    by_name = {r.architecture: r for r in report.rows}
    assert by_name["AForCausalLM"].cls == "sglang.srt.models.aliased.AForCausalLM"
    assert by_name["AForCausalLM"].reason == (
        "set_eagle3_layers_to_capture from BaseForCausalLM (sglang.srt.models.base)"
    )
    assert by_name["AForCausalLM"].embed_and_head and not by_name["LoneForCausalLM"].embed_and_head
    assert "patchable" not in json.dumps(report.to_dict())
    assert by_name["LoneForCausalLM"].reason.endswith(
        "patches it only where its shape is the standard one (docs/sglang.md)"
    )
    assert report.counts() == {
        State.NATIVE: 2,
        State.DRAFT: 2,
        State.MISSING: 2,
        State.NOT_GENERATIVE: 2,
        State.UNREAD: 1,
    }


def test_names_resolve_through_imports_not_through_text(tmp_path):
    package = Package(fake_sglang(tmp_path))
    found = {e.architecture: (e.registered_in, e.cls.qualname if e.cls else None) for e in entries(package)}
    # zagain.py re-registers the imported class: SGLang would assert; it is listed once, from the first module
    assert found["BaseForCausalLM"] == ("sglang.srt.models.base", "sglang.srt.models.base.BaseForCausalLM")
    assert found["make_class()"] == ("sglang.srt.models.unread", None)
    assert "SubForCausalLM" not in found and "Alias" not in found
    nextn = package.resolve("sglang.srt.models.drafts", "NextN")
    assert [c.name for c in package.lineage(nextn)] == ["NextN", "BaseForCausalLM"]  # through `import *`
    assert package.resolve("sglang.srt.models.base", "nn") is None  # outside the package


def test_scan_text_and_json(tmp_path, cli):
    site = fake_sglang(tmp_path)
    result = cli("scan", "--target", "sglang", "--site-packages", str(site))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"SGLang 0.0.1 at {site.resolve()}"
    assert lines[1].split() == ["architecture", "state", "capture", "idiom", "reason"]
    assert any(ln.split()[:5] == ["MForCausalLM", "missing", "siblings:", "list", "append"] for ln in lines)
    assert lines[-1] == "9 registered: 2 native, 2 missing, 2 draft, 2 not generative, 1 unread"
    code, data = cli.json("scan", "--target", "sglang", "--site-packages", str(site))
    assert code == 0 and data["target"] == "sglang" and data["install"]["version"] == "0.0.1"
    assert data["counts"] == {"native": 2, "patched": 0, "draft": 2, "missing": 2, "not generative": 2, "unread": 1}
    assert data["architectures"][4] == {
        "architecture": "MForCausalLM",
        "state": "missing",
        "module": "sglang.srt.models.missing",
        "class": "sglang.srt.models.missing.MForCausalLM",
        "idioms": ["list append"],
        "get_embed_and_head": False,
        "reason": "no set_eagle3_layers_to_capture in its lineage; apply --target sglang --arch NAME patches it only "
        "where its shape is the standard one (docs/sglang.md)",
    }


def test_scan_through_python_finds_the_same_install(tmp_path, cli):
    site = fake_sglang(tmp_path)
    python = venv_with(site, tmp_path / "venv")
    code, data = cli.json("scan", "--target", "sglang", "--python", str(python))
    assert code == 0, data
    assert data["install"]["site_packages"] == str(site.resolve()) and data["install"]["python"] == str(python)
    assert (
        data["architectures"]
        == cli.json("scan", "--target", "sglang", "--site-packages", str(site))[1]["architectures"]
    )


def test_no_sglang_is_an_environment_error(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    result = cli("scan", "--target", "sglang", "--site-packages", str(tmp_path / "empty"))
    assert result.exit_code == 4
    assert result.stderr.splitlines()[0] == f"error: no SGLang distribution found in {tmp_path / 'empty'}"
    with pytest.raises(InstallNotFound, match="no SGLang distribution found in the environment of"):
        api.scan_sglang(python=venv_with(tmp_path / "empty", tmp_path / "venv"))


@pytest.mark.parametrize(
    "command",
    [
        ["export", "--arch", "LlamaForCausalLM"],
    ],
    ids=lambda c: " ".join(c),
)
def test_every_other_command_refuses_the_target_and_changes_nothing(tmp_path, cli, command):
    site = fake_sglang(tmp_path)
    (tmp_path / "MODEL").mkdir()
    (tmp_path / "MODEL" / "config.json").write_text('{"architectures": ["BaseForCausalLM"]}')
    args = [a.replace("MODEL", str(tmp_path / "MODEL")) for a in command]
    before = snapshot(tmp_path)
    result = cli(*args, "--target", "sglang", "--site-packages", str(site))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: --target sglang: '{command[0]}' is not written for SGLang yet; only 'scan', 'doctor', 'apply', "
        "'verify', 'revert', 'status', 'resolve', 'explain' are (issue 44)",
        # the step repeats the --site-packages given (a fresh user ran the old hint: it found no SGLang)
        f"hint: run 'patchkit scan --target sglang --site-packages {site}' "
        "(each architecture's EAGLE-3 state; docs/sglang.md)",
    ]
    assert result.stdout == "" and "Traceback" not in result.output
    assert snapshot(tmp_path) == before


def test_a_refusal_in_json_carries_its_step(tmp_path, cli):
    site = fake_sglang(tmp_path)
    code, report = cli.json("export", "--arch", "LlamaForCausalLM", "--target", "sglang", "--site-packages", str(site))
    assert code == 2 and report["exit_code"] == 2
    assert report["next_step"]["argv"] == ["patchkit", "scan", "--target", "sglang", "--site-packages", str(site)]


@pytest.mark.parametrize("typed, close", [("sglangg", "sglang"), ("SGLang", "sglang"), ("vlm", "vllm"), ("trt", None)])
def test_an_unknown_target_names_the_close_one_and_lists_sglang(typed, close, cli):
    result = cli("scan", "--target", typed)
    assert result.exit_code == 2 and "Traceback" not in result.output
    first, hint = result.stderr.splitlines()
    assert first == f"error: unknown --target {typed!r}" + (f": did you mean {close!r}?" if close else "")
    commands = "scan, doctor, apply, verify, revert, status, resolve, explain"
    assert hint == f"hint: known targets: vllm, sglang ({commands} only; docs/sglang.md)"


@pytest.mark.parametrize("command", [["list"], ["guard", "install"], ["watch", "remove"]], ids=" ".join)
def test_commands_without_an_install_option_refuse_it_too(cli, command):
    result = cli(*command, "--target", "sglang")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        f"error: --target sglang: '{' '.join(command)}' is not written for SGLang yet; only 'scan', 'doctor', 'apply', "
        "'verify', 'revert', 'status', 'resolve', 'explain' are (issue 44)"
    )


def test_the_refusal_in_json_is_one_object(tmp_path, cli):
    site = str(fake_sglang(tmp_path))
    code, data = cli.json("export", "--arch", "LlamaForCausalLM", "--target", "sglang", "--site-packages", site)
    assert code == 2 and data["exit_code"] == 2 and data["error"].startswith("--target sglang: 'export' is not")


# -- the real releases -------------------------------------------------------------------------------

COUNTS = {
    "0.5.14": (221, {"native": 44, "missing": 126, "draft": 26, "not generative": 25}),
    "0.5.16": (234, {"native": 46, "missing": 132, "draft": 31, "not generative": 25}),
    "0.5.23": (290, {"native": 54, "missing": 160, "draft": 46, "not generative": 30}),
}
"""What ``scan --target sglang`` reports on each real release (docs/sglang.md, "What scan reports")."""


@functools.cache
def scanned(version: str):
    """The scan of a real release, once per test session (a scan of 0.5.23 reads 330 files: seconds)."""
    return api.scan_sglang(site_packages=pristine_site_packages(version))


def test_the_pinned_counts_are_the_declared_releases():
    assert list(COUNTS) == [r.version for r in SGLANG_RELEASES]


@pytest.mark.release
@pytest.mark.parametrize("version", list(COUNTS))
def test_scan_counts_on_the_real_release(version):
    report = scanned(version)
    registered, counts = COUNTS[version]
    assert str(report.install.version) == version
    assert len(report.rows) == registered
    assert {s.value: n for s, n in report.counts().items()} == counts


@pytest.mark.release
def test_named_classes_on_0_5_23():
    rows = {r.architecture: r for r in scanned("0.5.23").rows}
    want = {
        "LlamaForCausalLM": (State.NATIVE, ("capture boundary",)),
        "Phi3ForCausalLM": (State.NATIVE, ("capture boundary",)),  # inherits LlamaForCausalLM's setter
        "Gemma3ForCausalLM": (State.NATIVE, ("list append",)),
        "Qwen3MoeForCausalLM": (State.NATIVE, ("per-layer flag",)),
        "MixtralForCausalLM": (State.MISSING, ()),
        "LlamaForCausalLMEagle3": (State.DRAFT, ()),
        "DeepseekV3ForCausalLMNextN": (State.DRAFT, ()),
        "DFlashDraftModel": (State.DRAFT, ()),
        "BertModel": (State.NOT_GENERATIVE, ()),
        "EmbeddingGemmaModel": (State.NOT_GENERATIVE, ()),
    }
    assert {name: (rows[name].state, rows[name].idioms) for name in want} == want
    assert (
        rows["Phi3ForCausalLM"].reason == "set_eagle3_layers_to_capture from LlamaForCausalLM (sglang.srt.models.llama)"
    )
    # registered by dots3.py's EntryClass, written in dots3_common/modeling.py: resolved through the import
    assert rows["Dots3NoteForCausalLM"].module == "sglang.srt.models.dots3"
    assert rows["Dots3NoteForCausalLM"].cls == "sglang.srt.models.dots3_common.modeling.Dots3NoteForCausalLM"
    assert not [r for r in rows.values() if r.state is State.UNREAD]


@pytest.mark.release
def test_the_three_capture_idioms_are_in_the_real_files():
    """Each idiom the issue names is found in native classes; llama.py moved from the list to the boundary."""
    for version, llama in (("0.5.14", ("list append",)), ("0.5.23", ("capture boundary",))):
        rows = scanned(version).rows
        native = [r for r in rows if r.state is State.NATIVE]
        assert {i for r in native for i in r.idioms} == {"list append", "capture boundary", "per-layer flag"}
        assert next(r for r in native if r.architecture == "LlamaForCausalLM").idioms == llama


@pytest.mark.release
def test_scan_through_python_on_a_real_release(tmp_path, cli):
    site = pristine_site_packages("0.5.16")
    python = venv_with(site, tmp_path / "venv")
    code, data = cli.json("scan", "--target", "sglang", "--python", str(python))
    assert code == 0 and data["install"]["version"] == "0.5.16"
    assert {k: n for k, n in data["counts"].items() if n} == COUNTS["0.5.16"][1]
    assert data["counts"]["unread"] == 0  # every state is a key (a fresh user missed "unread")
