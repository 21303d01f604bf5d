"""Which tensor is the residual stream (issue 17, item 1), and one verdict for every command (item 3).

patchkit used to write ``hidden_states + residual`` wherever the loop reads
``hidden_states, residual = layer(...)``. Some layers keep their own residual: they overwrite the one
they are given, add it back inside and return the full stream as ``hidden_states`` (0.33.0 and
0.15.1 ``exaone4.py``). There ``hidden_states + residual`` is no stream at all. Each kind of defect
found on real releases has a test here that failed before :mod:`patchkit.vllm.stream.residual` (checked by
stashing the fix):

- kind 1, the layer keeps its own residual (Exaone4, PhiMoE, HyperCLOVAX, MiniMax-Text-01):
  captured as ``hidden_states`` alone, and verify fails a capture that adds the residual;
- kind 2, the backbone's two-argument norm hands the residual back unread (0.17.1 / 0.15.1
  ``commandr.py`` ``LayerNorm``): Cohere is hidden-states-only there; on 0.33.0 its norm class is
  chosen at run time, the code does not say, and patchkit refuses naming ``file:line``;
- kind 3, the layer's code does not settle it (0.33.0 ``models/flint/model.py``: one return path
  hands back a fused kernel's value): refused, naming ``file:line``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from patchkit import api
from patchkit.vllm.release import contract as contract_mod
from patchkit.vllm.release.install import from_site_packages
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.stream.residual import Entry, Exit, Tail, entry_of, exit_of, passes_through, tail_of

LOCATED = re.compile(r"vllm/\S+\.py:\d+")


def _fn(src: str) -> ast.FunctionDef:
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


# -- the three signals, on code of our own ----------------------------------------------------

FUSED_LAYER = """
def forward(self, positions, hidden_states, residual):
    if residual is None:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
    else:
        hidden_states, residual = self.input_layernorm(hidden_states, residual)
    hidden_states = self.self_attn(positions, hidden_states)
    hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
    hidden_states = self.mlp(hidden_states)
    return hidden_states, residual
"""

OWN_RESIDUAL_LAYER = """
def forward(self, positions, hidden_states, residual):
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(self.self_attn(positions, hidden_states))
    hidden_states = residual + hidden_states
    residual = hidden_states
    hidden_states = self.post_feedforward_layernorm(self.mlp(hidden_states))
    hidden_states = residual + hidden_states
    return hidden_states, residual
"""


def test_entry_reads_or_overwrites_the_residual():
    assert entry_of(_fn(FUSED_LAYER), "residual")[0] is Entry.READS
    assert entry_of(_fn(OWN_RESIDUAL_LAYER), "residual") == (Entry.OVERWRITES, 3)
    assert entry_of(_fn(OWN_RESIDUAL_LAYER), None)[0] is Entry.NOT_GIVEN


def test_exit_delta_stream_none_single_and_delegated():
    assert exit_of(_fn(FUSED_LAYER)) is Exit.DELTA
    assert exit_of(_fn(OWN_RESIDUAL_LAYER)) is Exit.STREAM
    assert (
        exit_of(_fn("def forward(self, h, residual):\n    h = residual + h\n    return h, None\n")) is Exit.NO_RESIDUAL
    )
    assert exit_of(_fn("def forward(self, h):\n    return h\n")) is Exit.SINGLE
    assert exit_of(_fn("def forward(self, h, r):\n    return self.mlp(h), r\n")) is Exit.DELTA
    delegated = _fn("def forward(self, h, r):\n    return self._post(h, r)\n")
    assert exit_of(delegated, lambda name: _fn(OWN_RESIDUAL_LAYER) if name == "_post" else None) is Exit.STREAM
    assert exit_of(delegated) is Exit.OTHER  # without a way to read the method: not said
    mixed = _fn("def forward(self, h, r):\n    if r is None:\n        return h\n    return h, r\n")
    assert exit_of(mixed) is Exit.OTHER


def _backbone(tail: str) -> tuple[ast.FunctionDef, ast.For]:
    fn = _fn(
        "def forward(self, hidden_states):\n    residual = None\n"
        "    for layer in self.layers[self.start_layer:self.end_layer]:\n"
        "        hidden_states, residual = layer(hidden_states, residual)\n" + tail + "    return hidden_states\n"
    )
    loop = next(s for s in fn.body if isinstance(s, ast.For))
    return fn, loop


@pytest.mark.parametrize(
    "tail, kind",
    [
        ("    hidden_states, _ = self.norm(hidden_states, residual)\n", Tail.FUSED),
        ("    hidden_states = hidden_states + residual\n", Tail.SUM),
        ("    hidden_states = self.norm(hidden_states)\n", Tail.ALONE),
        (
            "    if not last:\n"
            "        return IntermediateTensors({'hidden_states': hidden_states, 'residual': residual})\n"
            "    hidden_states = self.norm(hidden_states)\n",
            Tail.ALONE,
        ),
        ("    hidden_states = self.norm(hidden_states)\n    x = residual\n", Tail.NONE),
        ("", Tail.NONE),
    ],
)
def test_tail_how_the_backbone_combines_the_two(tail, kind):
    fn, loop = _backbone(tail)
    assert tail_of(fn, loop)[0] is kind


def test_a_norm_that_hands_the_residual_back_unread():
    assert passes_through(_fn("def forward(self, x, residuals=None):\n    x = f(x)\n    return x, residuals\n"))
    assert not passes_through(_fn("def forward(self, x, residual=None):\n    x = x + residual\n    return f(x), x\n"))
    assert not passes_through(_fn("def forward(self, *args):\n    return self._forward_method(*args)\n"))


# -- kind 1: the layer keeps its own residual, on real releases ---------------------------------

KEEPS_OWN = {  # architecture -> the file patchkit writes the capture into
    "0.33.0": {
        "Exaone4ForCausalLM": "exaone4.py",
        "PhiMoEForCausalLM": "phimoe.py",
        "HyperCLOVAXForCausalLM": "hyperclovax.py",
    },
    "0.15.1": {
        "Exaone4ForCausalLM": "exaone4.py",
        "PhiMoEForCausalLM": "phimoe.py",
        "MiniMaxText01ForCausalLM": "minimax_text_01.py",
    },
}


def _captures(source: str) -> list[str]:
    """What the written capture takes: the appended value (inline form) or the residual argument (mixin form)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "append" and ast.unparse(node.func.value) == "aux_hidden_states":
                out.append(ast.unparse(node.args[0]))
            elif node.func.attr == "_maybe_add_hidden_state":
                out.append(f"hidden_states, residual={ast.unparse(node.args[3])}")
    return out


@pytest.mark.release
@pytest.mark.parametrize("version", sorted(KEEPS_OWN))
def test_a_layer_keeping_its_own_residual_is_captured_as_hidden_states_alone(release, cli, version):
    sp = release(version)
    for arch, filename in KEEPS_OWN[version].items():
        code, out = cli.json("scan", "--site-packages", str(sp))
        row = next(r for r in out["architectures"] if r["architecture"] == arch)
        assert row["state"] == "patchable" and row["shape"] == "hidden-states-only", row
        assert "keeps its own residual" in row["reason"] and LOCATED.search(row["reason"]), row
        # a hybrid whose mixers are not lossless here (MiniMax-Text-01's linear attention, docs/hybrids.md)
        # is refused without --force; the capture is what this test reads, so it is forced
        lossy = row["lossless"] is not None and not row["lossless"].startswith("lossless")
        code, out = cli.json(
            "apply",
            "--site-packages",
            str(sp),
            "--arch",
            arch,
            "--model",
            str(_model(sp.parent, arch)),
            *(["--force"] if lossy else []),
        )
        assert code == 0, (arch, out)
        captured = _captures((sp / "vllm/model_executor/models" / filename).read_text())
        assert captured, arch
        # the stream is hidden_states alone; never hidden_states + residual (a sum of two streams)
        assert all(c in ("hidden_states", "hidden_states, residual=None") for c in captured), (arch, captured)
        code, out = cli.json("verify", "--site-packages", str(sp), "--arch", arch)
        if lossy:  # verify fails on the mixers alone, not on the capture
            assert (
                code == 1
                and out["missing"]
                and all(
                    m.startswith("speculative decoding keeps greedy output (hybrid mixers): ") for m in out["missing"]
                )
            ), out
        else:
            assert code == 0, (arch, out)
        code, out = cli.json("revert", "--site-packages", str(sp))
        assert code == 0, out


def _model(root: Path, arch: str) -> Path:
    d = root / f"ckpt-{arch}"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": arch.lower()}))
    return d


@pytest.mark.release
@pytest.mark.parametrize(
    "version, wrong",
    [
        ("0.33.0", ("layer_idx + 1, hidden_states, None)", "layer_idx + 1, hidden_states, residual)")),
        ("0.15.1", ("aux_hidden_states.append(hidden_states)", "aux_hidden_states.append(hidden_states + residual)")),
    ],
)
def test_verify_fails_a_capture_that_adds_the_residual_where_the_layer_keeps_its_own(release, cli, version, wrong):
    """The old capture (``hidden_states + residual``) on Exaone4 is no stream: verify must say so."""
    sp = release(version)
    code, out = cli.json(
        "apply",
        "--site-packages",
        str(sp),
        "--arch",
        "Exaone4ForCausalLM",
        "--model",
        str(_model(sp.parent, "Exaone4ForCausalLM")),
    )
    assert code == 0, out
    path = sp / "vllm/model_executor/models/exaone4.py"
    text = path.read_text()
    assert text.count(wrong[0]) >= 1  # the inline form appends twice: before each layer and for id n
    path.write_text(text.replace(wrong[0], wrong[1], 1))  # the capture before each layer
    code, out = cli.json("verify", "--site-packages", str(sp), "--arch", "Exaone4ForCausalLM")
    assert code == 1, out
    flat = json.dumps(out)
    assert "is not the residual stream" in flat or "adds the residual" in flat, flat
    path.write_text(text)
    assert cli.json("revert", "--site-packages", str(sp))[0] == 0


# -- kind 2: a fused-looking norm call that combines nothing --------------------------------------


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.17.1", "0.15.1"])
def test_a_norm_that_hands_back_the_residual_makes_cohere_hidden_states_only(release, cli, version):
    sp = release(version)
    code, out = cli.json("scan", "--site-packages", str(sp))
    rows = {r["architecture"]: r for r in out["architectures"]}
    for arch in ("CohereForCausalLM", "Cohere2ForCausalLM"):
        assert rows[arch]["state"] == "patchable" and rows[arch]["shape"] == "hidden-states-only", rows[arch]
    code, out = cli.json("apply", "--site-packages", str(sp), "--model", str(_model(sp.parent, "CohereForCausalLM")))
    assert code == 0, out
    assert _captures((sp / "vllm/model_executor/models/commandr.py").read_text()) == ["hidden_states", "hidden_states"]
    assert cli.json("verify", "--site-packages", str(sp), "--arch", "CohereForCausalLM")[0] == 0


@pytest.mark.release
@pytest.mark.parametrize(
    "arch, names",
    [
        ("CohereForCausalLM", ("commandr.py",)),  # kind 2: the norm class is chosen at run time (0.33.0)
        ("FlintForCausalLM", ("flint/model.py",)),  # kind 3: a return path hands back a fused kernel's value
    ],
)
def test_unsaid_stream_is_refused_naming_the_code(release, cli, arch, names):
    sp = release("0.33.0")
    code, out = cli.json("scan", "--site-packages", str(sp))
    row = next(r for r in out["architectures"] if r["architecture"] == arch)
    assert row["state"] == "not patchable" and "which tensor is the residual stream" in row["reason"], row
    assert all(n in row["reason"] for n in names) and LOCATED.search(row["reason"]), row
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", arch, "--dry-run")
    assert code == 3, out
    (refused,) = [p for p in out["patches"] if p["outcome"] == "refused"]
    assert "which tensor is the residual stream" in refused["reason"]


# -- item 3: one verdict for scan, verify, apply and doctor, on every architecture ------------------


def _agreement(sp: Path, ckpt: Path) -> dict[str, tuple]:
    """Per architecture: (scan state, verify --arch ok, apply --dry-run's plan, doctor's in-effect ok).

    ``scan`` and ``apply --dry-run`` run through the API as the CLI runs them (apply plans, verifies the
    planned result and writes nothing); ``verify --arch`` and doctor's in-effect check run on one parsed
    tree, shared across architectures, so the whole release takes seconds.
    """
    from patchkit.plan.request import Request
    from patchkit.vllm.checkpoints.config import CheckpointConfig
    from patchkit.checks.doctor_target import in_effect_check, target_facts
    from patchkit.results import Outcome
    from patchkit.checks.verify import verify

    install = from_site_packages(sp)
    report = api.scan(install)
    tree = SourceTree(sp)
    contract = contract_mod.detect(tree)
    registry = Registry(tree)
    out = {}
    for row in report.rows:
        arch = row.architecture
        node = next(
            c
            for c in verify(tree, registry, contract, (arch,), (), requested=(arch,))
            if c.label == arch or c.label.startswith(f"{arch} -> ") or c.label == row.cls
        )
        # a config.json of our own naming only this architecture (A1 releases need its model type)
        (ckpt / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": f"t-{arch.lower()}"}))
        applied = api.apply(install, dry_run=True, request=Request((arch,), ckpt))
        outcomes = {p.outcome for p in applied.patches}
        plan = (
            "refused"
            if Outcome.REFUSED in outcomes
            else "patches"
            if Outcome.APPLIED in outcomes
            else "nothing"
            if outcomes <= {Outcome.UPSTREAM}
            else f"other {sorted(o.value for o in outcomes)}"
        )
        assert not applied.written
        facts = target_facts(CheckpointConfig(ckpt / "config.json", {"architectures": [arch]}), tree, registry)
        effect, _ = in_effect_check(facts, tree, registry, contract, install, [], ())
        backend = row.group == "_TRANSFORMERS_SUPPORTED_MODELS"  # vLLM's Transformers backend serves it
        state = "native (backend)" if backend and row.state == "native" else row.state
        if state == "patchable" and row.lossless is not None and not row.lossless.startswith("lossless"):
            state = "patchable, not lossless"  # a hybrid whose mixers lose greedy output here: apply refuses it
        out[arch] = (state, node.ok, plan, effect.ok)
    return out


def _disagreements(table: dict[str, tuple]) -> dict[str, tuple]:
    expected_plan = {
        "native": {"nothing"},
        "native (backend)": {"nothing"},
        "not patchable": {"refused"},
        "patchable": {"patches"},
        "declared but broken": {"patches", "refused"},
        "patchable, not lossless": {"refused"},
    }
    bad = {}
    for arch, (state, verified, plan, effect) in table.items():
        if state == "native (backend)":
            # the backend's EAGLE-3 rests on the serving environment's transformers, which a
            # --site-packages tree cannot show: verify and doctor say "not checked", apply writes nothing
            if verified is not None or effect is not None or plan != "nothing":
                bad[arch] = (state, verified, plan, effect)
            continue
        in_effect = state == "native"
        # a class the registry names but patchkit cannot resolve has no chain: verify and doctor say "not checked"
        if (
            verified is not in_effect
            and not (verified is None and not in_effect)
            or plan not in expected_plan[state]
            or (effect is not None and effect is not in_effect)
        ):
            bad[arch] = (state, verified, plan, effect)
    return bad


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.33.0", "0.17.1"])
def test_scan_verify_apply_and_doctor_agree_on_every_architecture(release, tmp_path, version):
    sp = release(version)
    before = {p: p.read_bytes() for p in (sp / "vllm/model_executor/models").glob("*.py")}
    (tmp_path / "ckpt").mkdir()
    table = _agreement(sp, tmp_path / "ckpt")
    assert {p: p.read_bytes() for p in (sp / "vllm/model_executor/models").glob("*.py")} == before  # dry runs
    assert len(table) > 150
    assert _disagreements(table) == {}
    if version == "0.33.0":
        for arch in ("CohereCompassForConditionalGeneration", "Qwen4ExpForConditionalGeneration"):
            assert table[arch][0] == "declared but broken", table[arch]


@pytest.mark.release
def test_verify_fails_a_capture_that_leaves_the_residual_out_after_a_fused_layer(release, cli):
    """The mirror case: after a fused layer hidden_states is its delta; a capture passing None is no stream."""
    sp = release("0.33.0")
    code, out = cli.json("apply", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert code == 0, out
    path = sp / "vllm/model_executor/models/olmoe.py"
    text = path.read_text()
    right = "layer_idx + 1, hidden_states, residual)"
    assert text.count(right) == 1
    path.write_text(text.replace(right, "layer_idx + 1, hidden_states, None)"))
    code, out = cli.json("verify", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert code == 1 and "leaves the residual out" in json.dumps(out), out
    path.write_text(text)
    code, out = cli.json("verify", "--site-packages", str(sp), "--arch", "OlmoeForCausalLM")
    assert code == 0, out


# The split-layer idiom (issue 29): 0.34.0 runs a layer's input norm apart from the rest of the
# layer and captures ``residual.clone()`` after that fused add-and-norm, before the rest runs.
SPLIT = {
    "MiniMaxM3SparseForCausalLM": "MiniMaxM3Model",
    "MiniMaxM3SparseForConditionalGeneration": "MiniMaxM3Model",
    "MistralLarge4ForCausalLM": "MistralLarge4Model",
}


def _split_capture(sp: Path, backbone: str) -> tuple[Path, ast.stmt, ast.If]:
    """The backbone's file (the class as the scan names it), its loop's input-norm statement and the
    capture ``if`` that follows it, found by structure in the release's own file."""
    code, scanned = _scan_json(sp)
    where = next(
        a["location"]
        for a in scanned["architectures"]
        if a["architecture"] in SPLIT and SPLIT[a["architecture"]] == backbone
    )
    path = sp / where.split(":")[0]
    cls = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef) and n.name == backbone)
    forward = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    loop = next(n for n in forward.body if isinstance(n, ast.For))
    capture = next(s for s in loop.body if isinstance(s, ast.If) and "aux_hidden_state_layers" in ast.unparse(s.test))
    norm = loop.body[loop.body.index(capture) - 1]
    assert isinstance(norm, ast.Assign) and isinstance(norm.value.func, ast.Attribute)
    return path, norm, capture


def _scan_json(sp: Path) -> tuple[int, dict]:
    from typer.testing import CliRunner

    from patchkit.ui.cli import app

    result = CliRunner().invoke(app, ["scan", "--site-packages", str(sp), "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.release
def test_the_split_layer_capture_of_0_34_0_is_native(tmp_path, cli):
    from vllm_release import fresh_copy

    sp = fresh_copy("0.34.0", tmp_path / "sp")
    _, scanned = _scan_json(sp)
    states = {a["architecture"]: a["state"] for a in scanned["architectures"]}
    assert {name: states[name] for name in SPLIT} == {name: "native" for name in SPLIT}
    for name in SPLIT:
        result = cli("verify", "--site-packages", str(sp), "--arch", name)
        assert result.exit_code == 0, result.stdout
        assert "residual.clone() after layer." in result.stdout


@pytest.mark.release
@pytest.mark.parametrize("backbone", sorted(set(SPLIT.values())))
@pytest.mark.parametrize("wrong", ["clone before the norm", "clone of the normed input"])
def test_a_split_layer_capture_of_the_wrong_tensor_is_refused(tmp_path, cli, backbone, wrong):
    from vllm_release import fresh_copy

    sp = fresh_copy("0.34.0", tmp_path / "sp")
    path, norm, capture = _split_capture(sp, backbone)
    lines = path.read_text().splitlines(keepends=True)
    norm_lines = lines[norm.lineno - 1 : norm.end_lineno]
    capture_lines = lines[capture.lineno - 1 : capture.end_lineno]
    if wrong == "clone before the norm":
        lines[norm.lineno - 1 : capture.end_lineno] = capture_lines + norm_lines
    else:
        edited = [line.replace("residual.clone()", "hidden_states.clone()") for line in capture_lines]
        assert edited != capture_lines
        lines[capture.lineno - 1 : capture.end_lineno] = edited
    path.write_text("".join(lines))
    names = [name for name, b in SPLIT.items() if b == backbone]
    _, scanned = _scan_json(sp)
    states = {a["architecture"]: (a["state"], a["reason"]) for a in scanned["architectures"]}
    for name in names:
        assert states[name][0] == "declared but broken", states[name]
        assert "captures the residual stream entering each layer" in states[name][1]
        result = cli("verify", "--site-packages", str(sp), "--arch", name)
        assert result.exit_code == 1, result.stdout
        said = " ".join(result.stdout.split())
        assert (
            ("is taken before layer." in said)
            if wrong == "clone before the norm"
            else ("hidden_states.clone() is not the residual stream" in said)
        )


@pytest.mark.release
def test_a_split_layer_backbone_without_the_capture_is_not_patchable(tmp_path):
    """The capture codemod writes ``hidden_states + residual`` before the layer call; in a split-layer
    loop that would add the normed input: such a backbone is refused, named, never called patchable."""
    from vllm_release import fresh_copy

    sp = fresh_copy("0.34.0", tmp_path / "sp")
    path, _, capture = _split_capture(sp, "MistralLarge4Model")
    module = ast.parse(path.read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "MistralLarge4Model")
    forward = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    final = [s for s in forward.body if isinstance(s, ast.If) and "aux_hidden_state_layers" in ast.unparse(s.test)]
    assert len(final) == 1
    wrapper = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "MistralLarge4ForCausalLM")
    base = next(b for b in wrapper.bases if isinstance(b, ast.Name) and b.id == "SupportsEagle3")
    lines = path.read_text().splitlines(keepends=True)
    row = lines[base.lineno - 1]
    lines[base.lineno - 1] = row[: base.col_offset] + row[base.end_col_offset :].removeprefix(",").lstrip(" ")
    for stmt in sorted([capture, final[0]], key=lambda s: -s.lineno):  # bottom first: line numbers hold
        del lines[stmt.lineno - 1 : stmt.end_lineno]
    path.write_text("".join(lines))
    _, scanned = _scan_json(sp)
    row = next(a for a in scanned["architectures"] if a["architecture"] == "MistralLarge4ForCausalLM")
    assert row["state"] == "not patchable", row
    assert "input norm apart from the rest of the layer" in row["reason"]
