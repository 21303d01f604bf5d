"""doctor on drafts that say less than they should (issue 20): no recorded aux layer ids, and a
vocabulary one row larger than the target's.

Configs in ``tests/checkpoints/`` were written for these tests with the fields of the public
checkpoints: nvidia's Llama-3.3-70B-Instruct-Eagle3 (a ModelOpt export whose ``eagle_config`` records
no ids; vllm#50170) against Llama-3.3-70B-Instruct, and a SpecForge Gemma-3-1B EAGLE-3 draft
(``vocab_size`` 262145, sized from ``len(tokenizer)``) against Gemma-3-1B-it (262144). Tokenizer
files and the draft's ``d2t``/``t2d`` weights are written by the tests (synthetic, same format).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

pytestmark = pytest.mark.release

CHECKPOINTS = Path(__file__).parent / "checkpoints"
LLAMA_70B = CHECKPOINTS / "llama-3.3-70b-instruct"
NVIDIA_DRAFT = CHECKPOINTS / "llama-3.3-70b-instruct-eagle3"
GEMMA_1B = CHECKPOINTS / "gemma-3-1b-it"
SPECFORGE_DRAFT = CHECKPOINTS / "gemma-3-1b-eagle3-specforge"
IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
VLLM_50170_IDS = "(2, 40, 77)"
"""The ids vLLM logged for this draft and target in vllm#50170 (its own engine, not patchkit)."""


def doctor(cli, sp: Path, model: Path, draft: Path) -> tuple[int, dict]:
    return cli.json("doctor", "--model", str(model), "--draft", str(draft), "--site-packages", str(sp))


def top(report: dict, prefix: str) -> dict:
    (found,) = [c for c in report["checks"] if c["label"].startswith(prefix)]
    return found


def line_at(sp: Path, location: str) -> str:
    path, _, line = location.rpartition(":")
    return (sp / path).read_text().splitlines()[int(line) - 1]


# -- a draft that records no layer ids ----------------------------------------------------------


@pytest.mark.parametrize("version", ["0.10.2", "0.12.0", "0.17.1", "0.20.2", "0.33.0"])
def test_a_draft_without_ids_gets_a_warning_naming_vllms_ids_and_where_to_set_them(release, cli, version):
    sp = release(version)
    code, report = doctor(cli, sp, LLAMA_70B, NVIDIA_DRAFT)
    assert code == 0 and report["ready"] is True, report["missing"]  # it runs: the fault is silent
    (warning,) = [w for w in report["warnings"] if "records no aux layer ids" in w]
    assert f"vLLM {version} will capture {VLLM_50170_IDS}" in warning
    assert "vllm#50170" in warning and IDS_FIELD in warning

    ids = top(report, f"aux layer ids {VLLM_50170_IDS}")
    (note,) = [c for c in ids["children"] if c["label"] == "the draft records its aux layer ids"]
    assert note["ok"] is None
    # the getter named is the one the release defines, at the line named
    assert "def get_eagle3_" in line_at(sp, note["location"])
    # where the release reads the field: every location named holds the reader
    readers = [loc for loc in _locations(warning) if "eagle3_aux_layers_from_config" in line_at(sp, loc)]
    if "reads no ids from a draft" in warning:
        assert readers == []
    else:
        assert readers and f'set "{IDS_FIELD}"' in warning


def _locations(text: str) -> list[str]:
    import re

    return re.findall(r"(vllm/[\w/]+\.py:\d+)", text)


def test_a_draft_that_records_its_ids_gets_no_such_warning(release, cli, tmp_path):
    sp = release("0.17.1")
    draft = tmp_path / "draft"
    shutil.copytree(NVIDIA_DRAFT, draft)
    config = json.loads((draft / "config.json").read_text())
    config[IDS_FIELD] = [2, 40, 77]
    (draft / "config.json").write_text(json.dumps(config))
    code, report = doctor(cli, sp, LLAMA_70B, draft)
    assert code == 0
    assert not [w for w in report["warnings"] if "records no aux layer ids" in w]


# -- the vocabulary: sizes, d2t/t2d and the tokenizers --------------------------------------------


def tokenizer_json(folder: Path, size: int, *, prefix: str = "t", added: tuple[tuple[int, str], ...] = ()) -> None:
    """A tokenizer.json of ``size`` BPE ids (tokens ``prefix0``...) and added special tokens."""
    vocab = {f"{prefix}{i}": i for i in range(size)}
    tokens = [{"id": i, "content": c, "special": True} for i, c in ((0, "<pad>"), (1, "<eos>"), (2, "<bos>"), *added)]
    (folder / "tokenizer.json").write_text(
        json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": tokens})
    )


def maps_safetensors(folder: Path, target_ids: list[int], t2d_size: int) -> None:
    """model.safetensors with SpecForge's ``d2t`` (int64 offsets) and ``t2d`` (bool flags)."""
    d2t = struct.pack(f"<{len(target_ids)}q", *(t - i for i, t in enumerate(target_ids)))
    chosen = set(target_ids)
    t2d = bytes(1 if i in chosen else 0 for i in range(t2d_size))
    header = {
        "d2t": {"dtype": "I64", "shape": [len(target_ids)], "data_offsets": [0, len(d2t)]},
        "t2d": {"dtype": "BOOL", "shape": [t2d_size], "data_offsets": [len(d2t), len(d2t) + len(t2d)]},
    }
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + d2t + t2d)


@pytest.fixture
def gemma(release, tmp_path):
    """(site-packages of 0.33.0, target folder, draft folder): copies the tests can add files to."""
    model, draft = tmp_path / "gemma-3-1b-it", tmp_path / "draft"
    shutil.copytree(GEMMA_1B, model)
    shutil.copytree(SPECFORGE_DRAFT, draft)
    return release("0.33.0"), model, draft


def vocab_check(cli, sp: Path, model: Path, draft: Path) -> tuple[dict, dict]:
    _, report = doctor(cli, sp, model, draft)
    return top(report, "draft vocabulary"), report


def test_one_row_more_with_nothing_else_to_go_on_is_not_called_another_tokenizer(cli, gemma):
    sp, model, draft = gemma
    node, report = vocab_check(cli, sp, model, draft)
    assert node["ok"] is None and "another tokenizer" not in node["detail"]
    assert "(+1)" in node["detail"]
    assert not any(m.startswith("draft vocabulary") for m in report["missing"])
    assert any("tokenizer.json" in w and "262145" in w for w in report["warnings"])


def test_same_tokenizer_files_make_the_extra_row_padding(cli, gemma):
    sp, model, draft = gemma
    # Gemma 3's tokenizer adds <image_soft_token> at id 262144: len(tokenizer) is 262145
    tokenizer_json(model, 262144, added=((262144, "<image_soft_token>"),))
    shutil.copy(model / "tokenizer.json", draft / "tokenizer.json")
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is True and "the same tokenizer" in node["detail"]
    (pad,) = [c for c in node["children"] if c["label"].startswith("padded embedding")]
    assert pad["label"] == "padded embedding (+1 rows)" and pad["ok"] is None


@pytest.mark.parametrize("t2d_size", [262144, 262145])  # the target's size, or (SpecForge) the draft's own
def test_d2t_and_t2d_show_the_target_vocabulary(cli, gemma, t2d_size):
    sp, model, draft = gemma
    maps_safetensors(draft, [i * 8 for i in range(32000)], t2d_size)  # 32000 draft ids over the target's 262144
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is True, node
    assert "highest is 255992" in node["detail"]
    assert ("t2d has 262144 entries" in node["detail"]) is (t2d_size == 262144)
    (head,) = [c for c in node["children"] if c["label"] == "draft_vocab_size 32000"]
    assert head["ok"] is True  # the weights hold d2t


def test_d2t_beyond_the_target_vocabulary_fails(cli, gemma):
    sp, model, draft = gemma
    maps_safetensors(draft, [*(i * 8 for i in range(31999)), 262144], 262145)  # proposes id 262144
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is False and "target id 262144, beyond the target's vocab_size 262144" in node["detail"]


def test_t2d_of_another_vocabulary_fails(cli, gemma):
    sp, model, draft = gemma
    maps_safetensors(draft, [i * 4 for i in range(32000)], 151936)  # trained against Qwen's 151936 ids
    node, report = vocab_check(cli, sp, model, draft)
    assert node["ok"] is False and "another tokenizer" in node["detail"]
    assert "151936-id vocabulary" in node["detail"]
    assert any("151936" in a for a in report["actions"])


def test_equal_sizes_but_another_tokenizer_fails(cli, gemma):
    sp, model, draft = gemma
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 262144
    (draft / "config.json").write_text(json.dumps(config))
    tokenizer_json(model, 262144)
    tokenizer_json(draft, 262144, prefix="x")
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is False and "is not the target's" in node["detail"]


def test_sizes_far_apart_with_no_evidence_still_fail(cli, gemma):
    sp, model, draft = gemma
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 128256 + 262144  # neither padding nor added tokens
    (draft / "config.json").write_text(json.dumps(config))
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is False and "another tokenizer" in node["detail"]


def test_a_smaller_embedding_than_the_targets_ids_fails(cli, gemma):
    sp, model, draft = gemma
    tokenizer_json(model, 262144, added=((262144, "<image_soft_token>"),))
    shutil.copy(model / "tokenizer.json", draft / "tokenizer.json")
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 262100
    (draft / "config.json").write_text(json.dumps(config))
    node, _ = vocab_check(cli, sp, model, draft)
    assert node["ok"] is False and "no row in the draft's embedding" in node["detail"]


def test_an_unpatched_a1_target_is_not_credited_with_the_protocols_stub(release, cli):
    """On 0.17.1 Gemma3ForCausalLM has no getter until patched; the Protocol's stub returns nothing,
    so the warning gives vLLM's default form, not the stub, as the source of the ids."""
    sp = release("0.17.1")
    _, report = doctor(cli, sp, GEMMA_1B, SPECFORGE_DRAFT)
    (warning,) = [w for w in report["warnings"] if "records no aux layer ids" in w]
    assert "will capture (2, 13, 23), from the target's default (2, n // 2, n - 3) with n = 26" in warning
    assert "SupportsEagle3.get_eagle3_aux_hidden_state_layers" not in warning
