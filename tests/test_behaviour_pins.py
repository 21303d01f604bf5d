"""vLLM's behaviour, not only its names (issue 39): a verdict resting on a vLLM unit whose code changed since
the qualified releases says "not checked", never passes and never calls a class broken.

The fingerprint tests run on synthetic sources (offline). The release tests take the real 0.34.0 and 0.33.0
trees with the version raised to 0.35.0 (as a release newer than the qualified ones arrives) and RECORD
rewritten for every file a case changes (so patchkit sees a consistent release, not a drifted file), patch one
architecture on the unchanged copy, then change one unit's behaviour at a time, keeping every name:

- on main before the units were pinned, each of the "changes behaviour" cases passed ``verify --arch`` and
  the default ``verify`` (exit 0), let ``apply`` write, and ``doctor`` said ready (the issue's three
  examples are the first three cases);
- the harmless cases (comments, a reflowed signature, an unrelated rename, an internal attribute renamed
  everywhere) must call no class broken.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from patchkit.vllm.release.contract import NEWEST_QUALIFIED
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.runner import pins as pins_mod
from patchkit.vllm.runner.pins import fingerprint, pins
from patchkit.vllm.runner.units import UNITS
from releases import PREFETCHED
from vllm_release import fresh_copy, pristine_site_packages

NEWER = f"{Version(NEWEST_QUALIFIED).major}.{Version(NEWEST_QUALIFIED).minor + 1}.0"
INTERFACES = "vllm/model_executor/models/interfaces.py"
V2_EAGLE = "vllm/v1/worker/gpu/spec_decode/eagle"
PATCHED = "MixtralForCausalLM"
PATCHABLE = "Glm4ForCausalLM"

# -- fingerprints, offline --------------------------------------------------------------------------------

SOURCE = b'''
import os

class Mixin:
    """A docstring."""

    layers: tuple = ()

    def add(self, states, idx, hidden, residual):
        """Appends."""
        if idx in self.layers:  # a comment
            states.append(hidden + residual)
        return states

def flag():
    return os.getenv("FLAG", None)

environment_variables = {"FLAG": lambda: os.getenv("FLAG", None), "OTHER": lambda: 1}
if True:
    FLAG: bool | None = None
'''


def _print(source: bytes, name: str, anchors: tuple[str, ...] = (), entries_free: bool = False) -> str | None:
    hit = fingerprint(source, name, anchors, entries_free)
    return hit[0] if hit else None


@pytest.mark.parametrize("name", ["Mixin", "Mixin.add", "flag", "environment_variables[FLAG]", "FLAG"])
def test_comments_docstrings_and_formatting_do_not_change_a_fingerprint(name):
    reformatted = (
        SOURCE.replace(b'"""Appends."""', b'"""Appends, in other words."""')
        .replace(b"  # a comment", b"")
        .replace(
            b"def add(self, states, idx, hidden, residual):",
            b"def add(\n        self, states, idx, hidden, residual\n    ):",
        )
        .replace(b'"FLAG", None)', b'"FLAG",\n        None)')
        .replace(b"\nimport os\n", b"\nimport os\n# a new comment\n")
    )
    assert reformatted != SOURCE
    assert _print(SOURCE, name) is not None
    assert _print(reformatted, name) == _print(SOURCE, name)


@pytest.mark.parametrize(
    "name, old, new",
    [
        ("Mixin.add", b"        return states\n", b""),
        ("Mixin.add", b"hidden + residual", b"hidden"),
        ("Mixin", b"layers: tuple = ()", b"layers: tuple = (0,)"),
        ("flag", b'"FLAG", None)\n\nenv', b'"FLAG", "1")\n\nenv'),
        ("environment_variables[FLAG]", b'lambda: os.getenv("FLAG", None),', b'lambda: os.getenv("FLAG", "1"),'),
        ("FLAG", b"FLAG: bool | None = None", b"FLAG: bool | None = True"),
    ],
)
def test_a_change_of_behaviour_changes_the_fingerprint(name, old, new):
    assert old in SOURCE
    assert _print(SOURCE.replace(old, new, 1), name) != _print(SOURCE, name)


def test_anchors_pin_only_the_statements_that_read_them():
    anchored = _print(SOURCE, "Mixin.add", ("layers",))
    assert anchored is not None
    assert (
        _print(SOURCE.replace(b"states.append(hidden + residual)", b"states.append(hidden)"), "Mixin.add", ("layers",))
        != anchored
    )
    elsewhere = SOURCE.replace(b"        return states\n", b"        states = list(states)\n        return states\n")
    assert _print(elsewhere, "Mixin.add", ("layers",)) == anchored
    assert _print(SOURCE, "Mixin.add", ("nowhere",)) is None


def test_entries_free_ignores_the_entries_of_a_list_but_not_the_rule():
    source = (
        b"class C:\n    def f(self, t):\n        allowed = ['llama', 'qwen']\n"
        b"        return any(a in t for a in allowed)\n"
    )
    more = source.replace(b"'qwen']", b"'qwen', 'mixtral']")
    exact = source.replace(b"any(a in t for a in allowed)", b"t in allowed")
    base = _print(source, "C.f", ("allowed",), entries_free=True)
    assert _print(more, "C.f", ("allowed",), entries_free=True) == base
    assert _print(more, "C.f", ("allowed",)) != _print(source, "C.f", ("allowed",))
    assert _print(exact, "C.f", ("allowed",), entries_free=True) != base


def test_an_absent_unit_or_an_unparsable_file_has_no_fingerprint():
    assert _print(SOURCE, "Mixin.gone") is None
    assert _print(SOURCE, "Gone") is None
    assert _print(b"def (:\n", "flag") is None


def test_every_unit_names_what_patchkit_assumes_and_where():
    keys = [u.key for u in UNITS]
    assert len(keys) == len(set(keys))
    for u in UNITS:
        assert u.places and u.assumes and u.what
        assert all(path.startswith("vllm/") and path.endswith(".py") for path, _ in u.places)


# -- the qualified releases are pinned ---------------------------------------------------------------------


@pytest.mark.release
@pytest.mark.parametrize("version", PREFETCHED)
def test_every_qualified_release_has_its_units_pinned(version):
    found = pins(SourceTree(pristine_site_packages(version)), version)
    assert not [f.unit.key for f in found.found if f.changed], found.not_checked()
    assert any(f.relpath for f in found.found)


# -- plausible refactors of real releases ------------------------------------------------------------------


def _raise_version(sp: Path, version: str) -> None:
    """Make the copy's metadata say :data:`NEWER` (dist-info renamed, METADATA and RECORD rewritten)."""
    old, new = sp / f"vllm-{version}.dist-info", sp / f"vllm-{NEWER}.dist-info"
    old.rename(new)
    metadata = new / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"\nVersion: {version}\n", f"\nVersion: {NEWER}\n", 1))
    record = new / "RECORD"
    rows = record.read_text().splitlines(keepends=True)
    record.write_text("".join(r.replace(f"{old.name}/", f"{new.name}/", 1) for r in rows))


def _record_row(sp: Path, relpath: str) -> None:
    """Rewrite ``relpath``'s RECORD row for its bytes now (a consistent release, as a real one would be)."""
    record = sp / f"vllm-{NEWER}.dist-info" / "RECORD"
    data = (sp / relpath).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = [
        f"{relpath},sha256={digest},{len(data)}\n" if r.split(",", 1)[0] == relpath else r
        for r in record.read_text().splitlines(keepends=True)
    ]
    record.write_text("".join(rows))


@pytest.fixture(scope="module")
def trees(tmp_path_factory, cli_module):
    """0.34.0 and 0.33.0 as 0.35.0, Mixtral patched on each, and a Mixtral checkpoint and an EAGLE-3 draft."""
    root = tmp_path_factory.mktemp("pins")
    out = {}
    for version in ("0.34.0", "0.33.0"):
        sp = fresh_copy(version, root / version)
        _raise_version(sp, version)
        result = cli_module("apply", "--target", "vllm", "--site-packages", str(sp), "--arch", PATCHED)
        assert result.exit_code == 0, result.stdout
        out[version] = sp
    model, draft = root / "mixtral", root / "draft"
    model.mkdir()
    draft.mkdir()
    target = {"architectures": [PATCHED], "model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096}
    (model / "config.json").write_text(json.dumps({**target, "vocab_size": 32000, "num_attention_heads": 32}))
    eagle = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "draft_vocab_size": 32000,
        "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
    }
    (draft / "config.json").write_text(json.dumps(eagle))
    out.update(model=model, draft=draft)
    for version in ("0.34.0", "0.33.0"):  # the unchanged copies pass; how many classes scan calls broken there
        site = ("--site-packages", str(out[version]))
        code, said = _run(cli_module, "verify", *site, "--arch", PATCHED)
        assert code == 0, said[-800:]
        code, said = _run(cli_module, "doctor", *site, "--model", str(model), "--draft", str(draft))
        assert code == 0, said[-800:]
        BROKEN_BEFORE[version] = _broken(cli_module, site)
    return out


@pytest.fixture(scope="module")
def cli_module():
    from conftest import Cli

    return Cli()


def _edit(sp: Path, relpath: str, old: str, new: str, regex: bool = False) -> bytes:
    """Change ``relpath`` (RECORD follows); returns its bytes before, to put back."""
    path = sp / relpath
    before = path.read_bytes()
    text = before.decode()
    changed = re.sub(old, new, text) if regex else text.replace(old, new)
    assert changed != text, (relpath, old)
    path.write_text(changed)
    _record_row(sp, relpath)
    return before


# (release, file, old, new, what EAGLE-3 loses); every case keeps every name
BEHAVIOUR = [
    (
        "0.34.0",
        INTERFACES,
        "            aux_hidden_states.append(value)\n        return aux_hidden_states\n",
        "            aux_hidden_states.append(value)\n",
        "the capture helper returns nothing: len(None) on every forward",
    ),
    (
        "0.34.0",
        f"{V2_EAGLE}/eagle3_utils.py",
        '    layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)\n',
        '    layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)\n'
        "    layer_ids = [i + 1 for i in layer_ids or []]\n",
        "V2's reader adds 1 to the top-level ids: every capture one layer late",
    ),
    (
        "0.33.0",
        "vllm/envs.py",
        'os.getenv("VLLM_USE_V2_MODEL_RUNNER", None)',
        'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")',
        "the runner flag defaults to V2",
    ),
    (
        "0.34.0",
        INTERFACES,
        "value = hidden_states + residual if residual is not None else hidden_states",
        "value = hidden_states",
        "the helper captures the layer's output alone, not the residual stream",
    ),
    (
        "0.34.0",
        f"{V2_EAGLE}/eagle3_utils.py",
        "    aux_layers = get_eagle3_aux_layers_from_config(spec_config)\n    if aux_layers:",
        "    aux_layers = get_eagle3_aux_layers_from_config(spec_config)\n    if False:",
        "the V2 setter ignores the draft's ids",
    ),
    (
        "0.34.0",
        "vllm/v1/worker/gpu/model_runner.py",
        "hidden_states, aux_hidden_states = model_output",
        "aux_hidden_states, hidden_states = model_output",
        "the V2 runner unpacks the backbone's tuple the other way round",
    ),
    (
        "0.34.0",
        INTERFACES,
        "    return isinstance(model, SupportsEagle3)\n",
        "    return hasattr(model, 'get_eagle3_aux_hidden_state_layers')\n",
        "supports_eagle3 admits by another method's name",
    ),
    (
        "0.33.0",
        "vllm/v1/worker/gpu_model_runner.py",
        r"(?m)^(\s+)if layer_ids and isinstance\(layer_ids, \(list, tuple\)\):\n(\s+)return tuple\(layer_ids\)",
        r"\1if layer_ids and isinstance(layer_ids, (list, tuple)):\n\2return tuple(i + 1 for i in layer_ids)",
        "V1's reader adds 1 to the draft's ids",
    ),
]


def _run(cli, *args):
    result = cli(*args)
    return result.exit_code, " ".join((result.stdout + (result.stderr or "")).split())


@pytest.mark.release
@pytest.mark.parametrize("version, relpath, old, new, why", BEHAVIOUR, ids=[c[4] for c in BEHAVIOUR])
def test_a_changed_unit_fails_closed_on_every_command(trees, cli_module, version, relpath, old, new, why):
    sp, cli = trees[version], cli_module
    site = ("--site-packages", str(sp))
    before = _edit(sp, relpath, old, new, regex=old.startswith("(?m)"))
    try:
        code, said = _run(cli, "verify", *site, "--arch", PATCHED)
        assert code == 1 and "not checked" in said and f"vLLM {NEWER} changed" in said, said[-800:]
        code, said = _run(cli, "verify", *site)
        assert code == 1 and "not checked" in said, said[-800:]
        code, said = _run(cli, "doctor", *site, "--model", str(trees["model"]), "--draft", str(trees["draft"]))
        assert code == 1 and "not checked" in said, said[-800:]
        assert "patchkit apply" not in said.split("verdict:")[-1], said[-800:]  # no fix it has not established
        code, said = _run(cli, "apply", "--target", "vllm", *site, "--arch", PATCHABLE, "--dry-run")
        if "reader" not in why:  # the ids' readers are doctor's; apply writes nothing that depends on them
            assert code == 3 and "not checked" in said, said[-800:]
    finally:
        (sp / relpath).write_bytes(before)
        _record_row(sp, relpath)


BROKEN_BEFORE: dict[str, int] = {}


def _broken(cli, site) -> int:
    code, report = cli.json("scan", *site)
    return sum(r["state"] == "declared but broken" for r in report["architectures"])


HARMLESS = [
    ("0.34.0", INTERFACES, "class EagleModelMixin:\n", "# the mixin EAGLE-3 backbones use\nclass EagleModelMixin:\n"),
    (
        "0.34.0",
        INTERFACES,
        "    def _maybe_add_hidden_state(\n        self,\n        aux_hidden_states: list[torch.Tensor],\n",
        "    def _maybe_add_hidden_state(\n        self, aux_hidden_states: list[torch.Tensor],\n",
    ),
    ("0.34.0", INTERFACES, "def supports_mrope(", "def supports_mrope_renamed("),
    ("0.33.0", "vllm/envs.py", "def maybe_convert_bool(", "def maybe_convert_bool(  # reflowed\n"),
]


@pytest.mark.release
@pytest.mark.parametrize("version, relpath, old, new", HARMLESS, ids=["comment", "reflow", "rename", "comment-envs"])
def test_a_harmless_change_keeps_every_verdict(trees, cli_module, version, relpath, old, new):
    sp, site = trees[version], ("--site-packages", str(trees[version]))
    before = _edit(sp, relpath, old, new)
    try:
        assert not pins(SourceTree(sp), NEWER).changed(), pins(SourceTree(sp), NEWER).not_checked()
        code, said = _run(cli_module, "verify", *site, "--arch", PATCHED)
        assert code == 0, said[-800:]
    finally:
        (sp / relpath).write_bytes(before)
        _record_row(sp, relpath)


@pytest.mark.release
def test_an_internal_attribute_renamed_everywhere_calls_no_class_broken(trees, cli_module):
    """The mixin's ``aux_hidden_state_layers`` renamed in every file that uses it (natives follow it):
    verdicts resting on the mixin are not checked, and no working class is called broken."""
    sp, site = trees["0.34.0"], ("--site-packages", str(trees["0.34.0"]))
    saved = {}
    for path in sorted((sp / "vllm").rglob("*.py")):
        data = path.read_bytes()
        if b"aux_hidden_state_layers" in data:
            relpath = str(path.relative_to(sp))
            saved[relpath] = data
            path.write_bytes(re.sub(rb"\baux_hidden_state_layers\b", b"_aux_layer_ids", data))
            _record_row(sp, relpath)
    try:
        assert len(saved) > 10
        assert _broken(cli_module, site) <= BROKEN_BEFORE["0.34.0"]
        code, said = _run(cli_module, "verify", *site)
        assert code == 1 and "not checked" in said and "declared but broken" not in said, said[-800:]
    finally:
        for relpath, data in saved.items():
            (sp / relpath).write_bytes(data)
            _record_row(sp, relpath)


def test_the_recorded_prints_name_only_declared_units():
    data = json.loads(pins_mod.PRINTS_FILE.read_text())
    assert set(data["units"]) <= {u.key for u in UNITS}
    assert all(releases for per in data["units"].values() for releases in per.values())
