"""Weight files read without a tensor library (patchkit/vllm/checkpoints/weights.py,
patchkit/vllm/checkpoints/vocabulary.py), and the mapping-literal reader both model-type sources share
(patchkit/vllm/registry/model_types.py). Offline: files written here."""

from __future__ import annotations

import ast
import json
import struct
from pathlib import Path

from patchkit.vllm.registry.model_types import literal_mappings
from patchkit.vllm.checkpoints.vocabulary import read_maps
from patchkit.vllm.checkpoints.weights import read_header, weight_names


def _safetensors(path: Path, header: dict | bytes, data: bytes = b"") -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def test_d2t_and_t2d_are_read_from_the_header_and_data(tmp_path):
    d2t = struct.pack("<4q", 0, 1, 5, 10)  # draft ids 0..3 -> target ids 0, 2, 7, 13
    _safetensors(
        tmp_path / "model.safetensors",
        {
            "__metadata__": {"format": "pt"},
            "d2t": {"dtype": "I64", "shape": [4], "data_offsets": [0, 32]},
            "t2d": {"dtype": "BOOL", "shape": [20], "data_offsets": [32, 52]},
        },
        d2t + bytes(20),
    )
    maps = read_maps(tmp_path)
    assert maps is not None
    assert (maps.t2d_size, maps.d2t_size, maps.highest_target_id) == (20, 4, 13)
    assert weight_names(tmp_path) == {"d2t", "t2d"}


def test_a_deeply_nested_header_is_passed_over_not_raised(tmp_path):
    """A damaged draft shard with a JSON header nested past Python's decoder: the vocabulary maps are
    read from the other shard, and the tensor names are unknown (None); neither raises RecursionError."""
    _safetensors(tmp_path / "a.safetensors", DEEP)
    _safetensors(
        tmp_path / "b.safetensors",
        {"d2t": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}},
        struct.pack("<2q", 3, 3),
    )
    maps = read_maps(tmp_path)
    assert maps is not None and maps.file.endswith("b.safetensors") and maps.highest_target_id == 4
    assert weight_names(tmp_path) is None
    with (tmp_path / "a.safetensors").open("rb") as fh:
        assert read_header(fh) is None


def test_headers_that_are_not_objects_or_too_long_are_unreadable(tmp_path):
    for name, raw in (("list", b"[1, 2]"), ("not-json", b"{"), ("not-utf8", b'{"\xff": 1}')):
        with _safetensors(tmp_path / f"{name}.safetensors", raw).open("rb") as fh:
            assert read_header(fh) is None, name
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x00")
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    for name in ("short", "huge"):
        with (tmp_path / f"{name}.safetensors").open("rb") as fh:
            assert read_header(fh) is None, name
    assert read_maps(tmp_path) is None


def test_one_mapping_reader_for_transformers_and_vllm_tables():
    """The shapes of transformers' auto tables (4.x ``OrderedDict([...])``, 5.x dicts) and of vLLM's
    ``_CONFIG_REGISTRY`` (0.9.2 a dict of classes, 0.10.2 - 0.33.0 ``LazyConfigDict(k="V")``)."""
    module = ast.parse(
        'A = OrderedDict([("llama", "LlamaConfig"), ("gemma3", ("Gemma3Config", "X")), (k, "skipped")])\n'
        'B: dict = {"qwen3": "Qwen3Config", "other": some_call()}\n'
        'C: dict[str, type] = {"chatglm": ChatGLMConfig}\n'
        "D = make()\n"
        'D = LazyConfigDict(chatglm="ChatGLMConfig", kimi_k2="DeepseekV3Config")\n'
    )
    found = literal_mappings(module, ("A", "B", "C", "D", "E"))
    assert sorted(found) == ["A", "B", "C", "D"]
    assert found["A"].entries == (("llama", "LlamaConfig"), ("gemma3", ("Gemma3Config", "X")))
    assert found["B"].entries == (("qwen3", "Qwen3Config"), ("other", None))
    assert found["C"].entries == (("chatglm", None),)
    assert (found["D"].lineno, found["D"].entries) == (
        5,
        (("chatglm", "ChatGLMConfig"), ("kimi_k2", "DeepseekV3Config")),
    )
