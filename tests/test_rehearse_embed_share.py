"""Whether the draft's embedding is the target's, looked up where the release's loader takes it.

On the H100 (vLLM 0.34.0, 2026-12-07) the right capture of Gemma 3's multimodal wrapper passed its aux states
(8.6e-03, the nearest other layer 0.56), its acceptance (vLLM 8 of 8 at position 1, equal to offline) and greedy
output, and still ended "failed": the driver asked the wrapper for ``get_input_embeddings``, which 0.34.0's
``Gemma3ForConditionalGeneration`` does not have, and an unread check counted as failed
(``tests/engine_records/h100-vllm-0.34.0.jsonl``). vLLM's V2 loader takes the embedding from
``target.get_language_model().model.embed_tokens`` (or ``.embedding``): ``load_eagle_model`` and
``maybe_share_target_embed`` in ``vllm/v1/worker/gpu/spec_decode/eagle/utils.py``. The driver now follows the paths
patchkit reads from the install, and what it cannot find is "not checked" (not decided), never failed.
"""

from __future__ import annotations

import types

import pytest

from patchkit.rehearse import driver_run
from patchkit.rehearse.engine_measures import shares_target_embedding
from patchkit.rehearse.rehearsal import _from_step
from patchkit.rehearse.rehearsal_result import CheckName
from patchkit.rehearse.tolerances import Undecided
from patchkit.vllm.release.source import SourceTree

V2_READS = {"getter": "get_language_model", "paths": [["model", "embed_tokens"], ["model", "embedding"]]}
"""What :func:`driver_run.embed_reads` reads from 0.34.0 (checked on the release below)."""


class _Weight:
    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def _embedding(address: int):
    return types.SimpleNamespace(weight=_Weight(address))


def _wrapper(language_model):
    """A multimodal wrapper as 0.34.0's Gemma 3 is: ``get_language_model`` and no ``get_input_embeddings``."""
    return types.SimpleNamespace(get_language_model=lambda: language_model, language_model=language_model)


def _draft(embedding):
    return types.SimpleNamespace(model=types.SimpleNamespace(embed_tokens=embedding))


def test_a_wrappers_embedding_is_found_through_its_language_model():
    shared = _embedding(1)
    language_model = types.SimpleNamespace(model=types.SimpleNamespace(embed_tokens=shared))
    assert shares_target_embedding(_draft(shared), _wrapper(language_model), V2_READS) is True
    assert shares_target_embedding(_draft(_embedding(1)), _wrapper(language_model), V2_READS) is True  # same tensor
    assert shares_target_embedding(_draft(_embedding(2)), _wrapper(language_model), V2_READS) is False


def test_the_alternative_path_is_enough_and_a_plain_target_is_its_own_language_model():
    shared = _embedding(3)
    target = types.SimpleNamespace(model=types.SimpleNamespace(embedding=shared))
    assert shares_target_embedding(_draft(shared), target, V2_READS) is True


def test_what_is_not_found_is_unknown_never_false():
    target = _wrapper(types.SimpleNamespace(model=types.SimpleNamespace()))
    said = shares_target_embedding(_draft(_embedding(1)), target, V2_READS)
    assert isinstance(said, str) and said.startswith("unknown: no model.embed_tokens or model.embedding")
    said = shares_target_embedding(_draft(_embedding(1)), target, {})
    assert isinstance(said, str) and "loader was not read" in said


def test_an_unread_step_is_not_decided_and_a_false_one_fails():
    unread = _from_step(
        {
            "name": "draft_loaded",
            "ok": None,
            "detail": "not checked: unknown: no model.embed_tokens",
            "undecided": "NOT_READ",
        }
    )
    assert unread.name is CheckName.DRAFT_LOADED and unread.ok is None and unread.undecided is Undecided.NOT_READ
    wrong = _from_step({"name": "draft_loaded", "ok": False, "detail": "the draft's embed_tokens is not the target's"})
    assert wrong.ok is False and wrong.undecided is None
    not_run = _from_step({"name": "draft_loaded", "ok": None, "detail": "not run: an earlier step failed"})
    assert not_run.undecided is None


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.34.0", "0.20.2"])
def test_the_paths_are_read_from_the_release(release, version):
    """0.34.0 serves through V2's ``load_eagle_model``; 0.20.2 without the flag through V1's proposer: both take the
    language model's ``model.embed_tokens``, or ``model.embedding``."""
    reads = driver_run.embed_reads(SourceTree(release(version)))
    assert reads["getter"] == "get_language_model"
    assert reads["paths"] == V2_READS["paths"]
    assert reads["runner"] == ("V2" if version == "0.34.0" else "V1")
