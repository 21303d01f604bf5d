"""What the H200 said about greedy output with and without speculation under vLLM's two runners.

The records are ``benchmarks/spec_lossless.py campaign`` runs on one H200 (vLLM 0.20.2's CUDA build,
torch 2.11, 4 prompts x 48 greedy tokens, 3 speculative tokens), one JSON line per engine run: its
env (``unpatched``: the image's vLLM; ``patched``: a hard-linked copy patched by ``patchkit apply
--arch``), case, method (``none``, ``ngram``, ``eagle3``), runner (``v1``; ``v2`` =
``VLLM_USE_V2_MODEL_RUNNER=1``), dtype, path (``compiled`` = torch.compile and CUDA graphs, or
``eager``), the tokens, vLLM's own top-2 logprob gap at each position, and a digest of the target's
weights after the engine loaded. This file decides them again, without a GPU, with the same
comparison the script prints (:func:`spec_lossless.compare`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import spec_lossless  # noqa: E402

FIRST = HERE / "engine_records" / "h200-vllm-0.20.2-spec-lossless-1.jsonl"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(records: list[dict], **key) -> dict:
    found = [r for r in records if all(r.get(k) == v for k, v in key.items()) and r.get("tokens")]
    assert len(found) == 1, (key, len(found))
    return found[0]


def test_compare_names_the_first_difference_and_vllms_gap_there():
    """The comparison itself, on made-up runs: it must find a difference where there is one."""
    base = {"env": "e", "case": "c", "runner": "v2", "dtype": "bfloat16", "path": "compiled", "digest": "d"}
    plain = {**base, "method": "none", "tokens": [[1, 2, 3], [4, 5, 6]], "gaps": [[0.9, 0.01, 0.5], [1, 1, 1]]}
    spec = {**base, "method": "eagle3", "tokens": [[1, 7, 3], [4, 5, 6]], "gaps": [[0, 0, 0], [0, 0, 0]]}
    (out,) = spec_lossless.compare([plain, spec], tie=0.05)
    assert out["equal"] == "1/2" and out["first"][0] == {"first": 1, "gap": 0.01} and out["near_tie"] is True


def test_first_campaign_the_v2_divergence_is_the_plain_compiled_runs():
    """Patched Mixtral under V2, compiled bf16: EAGLE-3's tokens differ from the plain compiled run's from
    the first token (0 of 4 prompts equal, vLLM's own top-2 gap 0.17 to 0.53). But they are exactly
    (4 prompts x 48 tokens) the tokens of EAGLE-3 under V1 and of the *plain* patched engine under V1,
    all compiled; and the plain compiled runs split in two groups from the first token with no
    speculation at all: unpatched V1, unpatched V2 and patched V2 give one first token, patched V1 the
    other. Eager, EAGLE-3 under V2 equals the plain run exactly. So what differs is which of two
    answers a compiled bf16 engine of this miniature gives, speculation or not: not the patch, not V2."""
    records = rows(FIRST)
    p = dict(env="patched", case="mixtral", dtype="bfloat16")
    eagle_v2 = run(records, **p, method="eagle3", runner="v2", path="compiled")["tokens"]
    plain_v2 = run(records, **p, method="none", runner="v2", path="compiled")["tokens"]
    assert all(a[0] != b[0] for a, b in zip(eagle_v2, plain_v2))  # differs from the first token, 4 of 4
    assert eagle_v2 == run(records, **p, method="eagle3", runner="v1", path="compiled")["tokens"]
    plain_v1 = run(records, **p, method="none", runner="v1", path="compiled")["tokens"]
    assert eagle_v2 == plain_v1  # a plain compiled engine gives EAGLE-3's tokens, 4 x 48
    others = [
        run(records, env=e, case="mixtral", dtype="bfloat16", method="none", runner=r, path="compiled")["tokens"]
        for e, r in (("unpatched", "v1"), ("unpatched", "v2"))
    ]
    assert all(o == plain_v2 for o in others)  # the other group: unpatched V1 and V2 with patched V2
    assert all(a[0] != b[0] for a, b in zip(plain_v1, others[0]))  # two plain compiled runs, no speculation
    eager_plain = run(records, **p, method="none", runner="v2", path="eager")["tokens"]
    assert eager_plain == run(records, **p, method="eagle3", runner="v2", path="eager")["tokens"]
    digests = {r["digest"] for r in records if r["case"] == "mixtral" and r["dtype"] == "bfloat16" and r.get("digest")}
    assert len(digests) == 1  # the same target weights in every bf16 engine: the draft's load wrote nothing into them


def test_first_campaign_other_shapes_and_native_are_lossless_under_v2():
    """Under V2, compiled bf16: Exaone4 (the hidden-states-only shape), Gemma 3 (a dense standard loop)
    patched, and native Llama: EAGLE-3 gives the plain run's tokens on 4 of 4 prompts."""
    decided = {
        (c["env"], c["case"], c["runner"], c["path"], c["dtype"]): c
        for c in spec_lossless.compare(rows(FIRST), 0.05)
        if c["method"] == "eagle3"
    }
    for key in [
        ("patched", "exaone4", "v2", "compiled", "bfloat16"),
        ("patched", "gemma3", "v2", "compiled", "bfloat16"),
        ("unpatched", "llama", "v2", "compiled", "bfloat16"),
        ("patched", "mixtral", "v1", "compiled", "bfloat16"),
        ("patched", "mixtral", "v2", "eager", "bfloat16"),
    ]:
        assert decided[key]["equal"] == "4/4", key
        assert decided[key]["target_weights_same"] is True


@pytest.mark.parametrize("method", ["ngram"])
def test_first_campaign_v2_of_0_20_2_refuses_ngram(method):
    """The control the issue asked for (ngram on the unpatched target under V2) cannot run on 0.20.2:
    vLLM's config refuses it under V2 (``vllm/engine/arg_utils.py:2121``)."""
    refused = [r for r in rows(FIRST) if r["method"] == method and r["runner"] == "v2"]
    assert refused and all("does not yet support: speculative method 'ngram'" in r["error"] for r in refused)
    assert all(r["where"] == "vllm/engine/arg_utils.py:2121" for r in refused)
