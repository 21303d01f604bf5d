"""Hybrids (issue 31): whether a hybrid's mixers keep speculative decoding lossless, read per release.

On the H200 (vLLM 0.20.2, tests/engine_records/h200-vllm-0.20.2-lfm2.jsonl) LFM2 patched with
EAGLE-3 served other tokens than without speculation, in all four modes. vLLM 0.20.2's ``ShortConv``
never reads the mixer metadata's ``num_accepted_tokens``; 0.33.0's and 0.34.0's does. These tests run
patchkit's reading (:mod:`patchkit.vllm.stream.hybrids`) and its commands on the real release trees, and on
copies edited the way a release could differ (a mixer that stops reading the count, a hybrid whose
mixers cannot be found): the verdict must follow the code, and unknown must refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_models import LFM2_1B2
from patchkit.vllm.stream.hybrids import HYBRID_CHECK, read_architecture
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.source import SourceTree
from vllm_release import pristine_site_packages

SHORT_CONV = "vllm/model_executor/layers/mamba/short_conv.py"


def _reading(site: Path, arch: str):
    tree = SourceTree(site)
    return read_architecture(tree, Registry(tree), arch)


@pytest.mark.release
@pytest.mark.parametrize(
    "version, lossless", [("0.17.1", False), ("0.20.2", False), ("0.33.0", True), ("0.34.0", True)]
)
def test_lfm2s_short_conv_reads_the_accepted_count_only_from_0_33(version, lossless):
    reading = _reading(pristine_site_packages(version), "Lfm2ForCausalLM")
    assert reading.hybrid and [m.kind for m in reading.mixers] == ["ShortConv"]
    assert reading.lossless is lossless
    (mixer,) = reading.mixers
    assert mixer.evidence.startswith(SHORT_CONV + ":")
    line = int(mixer.evidence.rsplit(":", 1)[1])
    text = (pristine_site_packages(version) / SHORT_CONV).read_text().splitlines()[line - 1]
    # the evidence line is the read of the count where lossless, the conv state update that steps without it where not
    assert ("num_accepted_tokens" in text) if lossless else ("causal_conv1d_update" in text)
    assert reading.verdict().startswith("lossless: ShortConv" if lossless else "not lossless: ShortConv (")


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.17.1", "0.20.2", "0.33.0", "0.34.0"])
def test_every_patchable_hybrid_is_decided_on_every_tier(version):
    """Every hybrid the registry holds gets a verdict with evidence; the natively speculating mixers
    (Mamba-2 of NemotronH and FalconH1) read the count on every tier; Mamba-1 (Jamba) never does."""
    tree = SourceTree(pristine_site_packages(version))
    registry = Registry(tree)
    seen = {}
    for arch in registry.entries:
        reading = read_architecture(tree, registry, arch)
        if reading is not None and reading.hybrid:
            seen[arch] = reading
            assert all(m.evidence.startswith("vllm/") for m in reading.mixers)
    assert seen["FalconH1ForCausalLM"].lossless is True
    assert [m.kind for m in seen["FalconH1ForCausalLM"].mixers] == ["MambaMixer2"]
    assert seen["JambaForCausalLM"].lossless is False
    assert "Lfm2ForCausalLM" in seen and "NemotronHForCausalLM" in seen
    if version == "0.34.0":
        assert seen["Lfm3ForCausalLM"].lossless is True


@pytest.mark.release
def test_a_short_conv_that_stops_reading_the_count_is_not_lossless(release):
    """0.34.0 with ShortConv's reads of ``num_accepted_tokens`` taken out (what 0.20.2's looks like)."""
    site = release("0.34.0")
    path = site / SHORT_CONV
    text = path.read_text()
    assert ".num_accepted_tokens" in text
    path.write_text(text.replace("attn_metadata.num_accepted_tokens", "None"))
    reading = _reading(site, "Lfm3ForCausalLM")
    assert reading.lossless is False and reading.lossy[0].kind == "ShortConv"


@pytest.mark.release
def test_a_hybrid_whose_mixers_cannot_be_found_is_not_checked_and_refused(release, cli):
    """ShortConv no longer a MambaBase: patchkit cannot tell, so apply refuses (fail closed)."""
    site = release("0.34.0")
    path = site / SHORT_CONV
    path.write_text(path.read_text().replace("class ShortConv(MambaBase, ", "class ShortConv("))
    reading = _reading(site, "Lfm2ForCausalLM")
    assert reading.lossless is None and reading.verdict().startswith("not checked: ")
    result = cli("apply", "--arch", "Lfm2ForCausalLM", "--site-packages", str(site))
    assert result.exit_code == 3 and "not checked" in result.stdout


def _model(tmp_path: Path) -> Path:
    folder = tmp_path / "lfm2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LFM2_1B2))
    return folder


def _vllm_bytes(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in (site / "vllm").rglob("*.py")}


@pytest.mark.release
def test_apply_refuses_lfm2_on_0_20_2_and_force_says_what_is_accepted(release, cli, tmp_path):
    site = release("0.20.2")
    model = _model(tmp_path)
    before = _vllm_bytes(site)
    code, report = cli.json("apply", "--model", str(model), "--site-packages", str(site))
    assert code == 3 and report["refused"]
    (refused,) = [p for p in report["patches"] if p["outcome"] == "refused"]
    assert "not lossless: ShortConv (vllm/model_executor/layers/mamba/short_conv.py:" in refused["reason"]
    assert "--force" in refused["reason"]
    assert _vllm_bytes(site) == before

    code, report = cli.json("apply", "--model", str(model), "--site-packages", str(site), "--force")
    assert code == 0 and report["written"]
    (interface,) = [p for p in report["patches"] if p["id"] == "eagle3:Lfm2ForCausalLM:interface"]
    assert interface["note"].startswith("accepted with --force: not lossless: ShortConv")

    code, verified = cli.json("verify", "--model", str(model), "--site-packages", str(site))
    assert code == 1
    assert any(
        m.startswith("speculative decoding keeps greedy output (hybrid mixers): not lossless: ShortConv")
        for m in verified["missing"]
    )

    result = cli("doctor", "--model", str(model), "--site-packages", str(site))
    assert result.exit_code != 0 and "not lossless: ShortConv" in result.stdout

    code, scanned = cli.json("scan", "--site-packages", str(site))
    (row,) = [r for r in scanned["architectures"] if r["architecture"] == "Lfm2ForCausalLM"]
    assert row["lossless"].startswith("not lossless: ShortConv") and row["needs_force"] and row["forced"], row
    # patched with --force, it reads as status reads it (issue 42, finding 1)
    assert row["reason"].startswith("forced (apply --force): apply refuses it without") and "ShortConv" in row["reason"]


@pytest.mark.release
@pytest.mark.parametrize("arch", ["Lfm2ForCausalLM", "Lfm3ForCausalLM", "FalconH1ForCausalLM"])
def test_the_0_34_0_hybrids_stay_patchable_and_verify_says_lossless(release, cli, arch):
    site = release("0.34.0")
    code, report = cli.json("apply", "--arch", arch, "--site-packages", str(site))
    assert code == 0 and report["written"], report
    assert not any(p.get("note") for p in report["patches"])
    code, verified = cli.json("verify", "--arch", arch, "--site-packages", str(site))
    assert code == 0

    def nodes(check):
        yield check
        for child in check["children"]:
            yield from nodes(child)

    (node,) = [c for top in verified["checks"] for c in nodes(top) if c.get("kind") == HYBRID_CHECK]
    assert node["ok"] is True and node["detail"].startswith("lossless: ")


LFM2_RECORDS = Path(__file__).parent / "engine_records" / "h200-vllm-0.20.2-lfm2.jsonl"
"""LFM2 patched with EAGLE-3 on the H200 (vLLM 0.20.2's CUDA build, V1 runner, 2026-12-03): the
``right`` rows of ``benchmarks/gpu_campaign.py``'s records, one per mode, as the GPU wrote them."""


@pytest.mark.release
def test_rehearse_names_the_mixer_when_a_hybrids_greedy_output_differs():
    """The four recorded LFM2 runs, decided again with the reading of the release that ran them:
    the aux states are right, greedy output differs with no near-tie, and the failure names ShortConv
    and where 0.20.2's ShortConv steps its conv state without the accepted count."""
    from patchkit.rehearse.rehearsal import decided_checks
    from patchkit.rehearse.rehearsal_result import CheckName
    from patchkit.rehearse.verdict import Device, Dtype

    records = [json.loads(line) for line in LFM2_RECORDS.read_text().splitlines()]
    forced = [r for r in _records(HYBRID_RECORDS) if r["case"] == "lfm2"]
    assert len(forced) == 1  # after the decision: applied with --force, rehearse must fail naming the mixer
    printed = {c["name"]: c for c in forced[0]["report"]["checks"]}
    greedy_printed = next(c for name, c in printed.items() if name.startswith("greedy output"))
    assert greedy_printed["ok"] is False and "(ShortConv)" in greedy_printed["detail"]
    assert greedy_printed["where"].startswith(SHORT_CONV + ":")
    records += forced
    assert {(r["path"], r["dtype"]) for r in records} == {
        ("compiled", "bf16"),
        ("compiled", "fp32"),
        ("eager", "bf16"),
        ("eager", "fp32"),
    }
    reading = _reading(pristine_site_packages("0.20.2"), "Lfm2ForCausalLM")
    for record in records:
        report = record["report"]
        assert report["vllm"] == "vllm 0.20.2" and report["architecture"] == "Lfm2ForCausalLM"
        checks = {
            c.name: c for c in decided_checks(report["raw"], Device(report["device"]), Dtype(report["dtype"]), reading)
        }
        assert checks[CheckName.AUX].ok is True
        greedy = checks[CheckName.GREEDY]
        assert greedy.ok is False
        assert "no near-tie" in greedy.detail
        assert "the target is a hybrid, its mixers (ShortConv) are not lossless on this release" in greedy.detail
        assert greedy.where == reading.lossy[0].evidence and greedy.where.startswith(SHORT_CONV + ":")
        plain = {c.name: c for c in decided_checks(report["raw"], Device(report["device"]), Dtype(report["dtype"]))}
        assert "hybrid" not in plain[CheckName.GREEDY].detail  # the mixers are named only from the release's reading


HYBRID_RECORDS = Path(__file__).parent / "engine_records" / "h200-vllm-0.20.2-hybrids.jsonl"
"""The H200 campaign's hybrids after the decision (2026-12-03, vLLM 0.20.2, V1 runner): LFM2 applied with
``--force`` (compiled bf16), and Qwen3-Next, interface-only and lossless by patchkit's reading, twice in
compiled bf16, eager bf16 and compiled fp32, with ``PATCHKIT_ENGINE_ARGS`` choosing vLLM's Triton Gated
DeltaNet prefill (the staged vLLM has no FlashInfer)."""
NGRAM_CONTROL = Path(__file__).parent / "engine_records" / "h200-vllm-0.20.2-ngram-fp32.jsonl"
"""``benchmarks/spec_control.py --cases lfm2 --dtypes float32 [--eager]`` on the H200: the unpatched LFM2
with vLLM's own ngram speculation (no draft model, no aux states, nothing of patchkit's), fp32; and the
non-hybrid control, the unpatched Mixtral (``--cases mixtral``, compiled)."""


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.release
def test_a_hybrid_whose_mixers_read_the_accepted_count_keeps_greedy_output_on_the_gpu():
    """Qwen3-Next on the H200, decided again with 0.20.2's reading: its Gated DeltaNet mixers read
    ``num_accepted_tokens``; greedy output with EAGLE-3 equals greedy output without it up to a near-tie
    in every bf16 run (every draft rejected in the miniature: the mixers rolled rejected tokens back). The
    miniature's layers are too alike to tell a shifted capture apart, which rehearse names "not decided"
    instead of passing or failing; in fp32 vLLM's FLA chunk kernel refuses to run (vLLM's limit, not a verdict)."""
    from patchkit.rehearse.rehearsal import decided_checks
    from patchkit.rehearse.rehearsal_result import CheckName
    from patchkit.rehearse.verdict import AuxCause, Device, Dtype, Undecided

    reading = _reading(pristine_site_packages("0.20.2"), "Qwen3NextForCausalLM")
    assert reading.hybrid and reading.lossless is True
    runs = [r for r in _records(HYBRID_RECORDS) if r["case"] == "qwen3-next"]
    bf16 = [r for r in runs if r["dtype"] == "bf16"]
    assert {r["path"] for r in bf16} == {"compiled", "eager"} and len(bf16) == 4
    for r in bf16:
        report = r["report"]
        checks = {
            c.name: c for c in decided_checks(report["raw"], Device(report["device"]), Dtype(report["dtype"]), reading)
        }
        assert checks[CheckName.GREEDY].ok is True, checks[CheckName.GREEDY].detail
        aux = checks[CheckName.AUX]
        assert aux.ok is None and aux.figures["cause"] == AuxCause.AMBIGUOUS.name  # not decided (issue 41)
        assert aux.undecided is Undecided.LAYERS_ALIKE
    fp32 = [r for r in runs if r["dtype"] == "fp32"]
    assert len(fp32) == 2
    for r in fp32:
        started = next(c for c in r["report"]["checks"] if c["name"].startswith("engine started"))
        assert started["ok"] is False and "does not support float32" in started["detail"]
        assert started["where"].startswith("vllm/model_executor/layers/fla/")


def test_vllms_own_ngram_speculation_changes_lfm2s_fp32_output_after_a_speculative_step():
    """The control that needs nothing of patchkit's: in fp32, compiled and eager, the unpatched LFM2 under
    ngram speculation leaves greedy output unchanged where ngram never proposed, and changes it right after
    the one accepted draft, at a token transformers does not call a near-tie (its two tokens' logits are
    farther apart than rehearse's bf16 near-tie tolerance, 5e-2 relative)."""
    runs = [r for r in _records(NGRAM_CONTROL) if r["case"] == "lfm2"]
    assert {(r["path"], r["dtype"]) for r in runs} == {("compiled", "float32"), ("eager", "float32")}
    for r in runs:
        assert r["lossless"] is False and r["counters"]["vllm:spec_decode_num_drafts"] >= 1
        diverged = [p for p in r["prompts"] if p["first_divergence"] is not None]
        assert len(diverged) == 1
        (p,) = diverged
        assert p["transformers"]["gap"] > 5e-2
        assert p["plain_tokens"][: p["first_divergence"]] == p["ngram_tokens"][: p["first_divergence"]]


def test_vllms_own_ngram_speculation_keeps_a_non_hybrids_fp32_output():
    """The same control on Mixtral (attention only), compiled fp32: ngram proposed and was accepted many
    times, and greedy output stayed identical on every prompt, so the control itself can pass."""
    (run,) = [r for r in _records(NGRAM_CONTROL) if r["case"] == "mixtral"]
    assert run["dtype"] == "float32" and run["lossless"] is True
    assert run["counters"]["vllm:spec_decode_num_accepted_tokens"] >= 10
    assert all(p["first_divergence"] is None and p["plain_tokens"] == p["ngram_tokens"] for p in run["prompts"])
