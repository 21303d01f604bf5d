"""Which tokenizer a draft was trained for: read from the checkpoint folders, never from the sizes alone.

doctor compares the draft's ``vocab_size`` with the target's. A different number does not by itself
mean another tokenizer: exporters size the embedding from ``len(tokenizer)``, which counts added
tokens the model config does not (a SpecForge Gemma-3-1B draft has 262145 rows against the
target's 262144), or pad it to a multiple. This module gathers the evidence the folders hold:

- **the tokenizers** (``tokenizer.json``: ``model.vocab`` and ``added_tokens``; else
  ``tokenizer_config.json``: ``added_tokens_decoder`` and the named special tokens): their size
  (highest id + 1), their special tokens, and a digest of the whole vocabulary;
- **the draft's vocabulary maps** in its safetensors weights: ``t2d`` (one flag per *target* id the
  draft was trained against: its length is that vocabulary's size) and ``d2t`` (per draft id, the
  offset to its target id: the largest ``i + d2t[i]`` is the highest target id the draft proposes).

Only JSON headers (:mod:`patchkit.vllm.checkpoints.weights`) and the small ``d2t``/``t2d`` tensors (raw
little-endian data after the header) are read; no tensor library is imported.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.vllm.checkpoints.weights import read_header, safetensors_files

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
DRAFT_TO_TARGET = "d2t"
"""Weight name of the draft-to-target vocabulary map: per draft id, the offset to its target id
(vLLM 0.10.2 - 0.33.0 ``llama_eagle3.py`` ``load_weights`` renames it ``draft_id_to_target_id``;
without it the map stays zeros: draft id ``i`` is target id ``i``)."""
TARGET_TO_DRAFT = "t2d"
"""Per target id: whether the draft vocabulary holds it (vLLM skips it when loading)."""
MAX_MAP_BYTES = 64 * 1024 * 1024
"""Largest ``d2t`` patchkit reads (a 262144-entry int64 map is 2 MiB)."""
_INT_FORMATS = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "U16": "H", "U32": "I", "U64": "Q"}


@dataclass(frozen=True)
class TokenizerFacts:
    """One checkpoint folder's tokenizer, as far as its files say.

    Attributes:
        file: the file read (``tokenizer.json`` or ``tokenizer_config.json``).
        size: the highest token id + 1 (None: the file gives no ids).
        specials: special token text -> id.
        digest: sha256 of the full vocabulary (``tokenizer.json`` only; None otherwise).
    """

    file: str
    size: int | None
    specials: dict[str, int]
    digest: str | None


def read_tokenizer(folder: Path) -> TokenizerFacts | None:
    """The tokenizer in ``folder`` (``tokenizer.json`` first, else ``tokenizer_config.json``); None: neither
    file is there or readable."""
    file = folder / TOKENIZER_FILE
    data = _json(file)
    if isinstance(data, dict):
        model = data.get("model") if isinstance(data.get("model"), dict) else {}
        vocab = model.get("vocab")
        ids: list[int] = []
        if isinstance(vocab, dict):  # BPE / WordPiece: token -> id
            ids = [v for v in vocab.values() if isinstance(v, int)]
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
            ids = list(range(len(vocab)))
        added = [t for t in data.get("added_tokens") or () if isinstance(t, dict) and isinstance(t.get("id"), int)]
        ids += [t["id"] for t in added]
        specials = {str(t.get("content")): t["id"] for t in added if t.get("special")}
        canonical = json.dumps([vocab, [(t.get("id"), t.get("content")) for t in added]], sort_keys=True)
        return TokenizerFacts(
            str(file), max(ids) + 1 if ids else None, specials, hashlib.sha256(canonical.encode()).hexdigest()
        )
    file = folder / TOKENIZER_CONFIG
    data = _json(file)
    if not isinstance(data, dict):
        return None
    decoder = data.get("added_tokens_decoder") if isinstance(data.get("added_tokens_decoder"), dict) else {}
    specials: dict[str, int] = {}
    for key, token in decoder.items():
        if isinstance(token, dict) and token.get("special") and str(key).isdigit():
            specials[str(token.get("content"))] = int(key)
    # the added tokens alone do not give the vocabulary's size: only tokenizer.json does
    return TokenizerFacts(str(file), None, specials, None)


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8-sig")) if file.is_file() else None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


@dataclass(frozen=True)
class VocabMaps:
    """The draft's ``d2t``/``t2d`` tensors, when its safetensors weights hold them.

    Attributes:
        file: the weights file they were read from.
        t2d_size: length of ``t2d`` (the target vocabulary the draft was trained against), or None.
        d2t_size: length of ``d2t`` (the draft vocabulary), or None.
        highest_target_id: the largest ``i + d2t[i]`` (the highest target id it proposes), or None.
    """

    file: str
    t2d_size: int | None
    d2t_size: int | None
    highest_target_id: int | None


def read_maps(folder: Path) -> VocabMaps | None:
    """``d2t``/``t2d`` of the ``*.safetensors`` files in ``folder``; None: no such file holds either.

    A file whose header cannot be read (:func:`patchkit.vllm.checkpoints.weights.read_header`) is passed over.
    """
    for file in safetensors_files(folder):
        try:
            with file.open("rb") as fh:
                header = read_header(fh)
                if header is None:
                    continue
                t2d, d2t = _entry(header.entries, TARGET_TO_DRAFT), _entry(header.entries, DRAFT_TO_TARGET)
                if t2d is None and d2t is None:
                    continue
                highest = None
                if d2t is not None and d2t["dtype"] in _INT_FORMATS and len(d2t["shape"]) == 1:
                    start, end = d2t["data_offsets"]
                    if 0 <= end - start <= MAX_MAP_BYTES:
                        fh.seek(header.data_start + start)
                        raw = fh.read(end - start)
                        fmt = _INT_FORMATS[d2t["dtype"]]
                        count = len(raw) // struct.calcsize(fmt)
                        if count == d2t["shape"][0]:
                            offsets = struct.unpack(f"<{count}{fmt}", raw)
                            highest = max((i + o for i, o in enumerate(offsets)), default=None)
                return VocabMaps(
                    str(file),
                    t2d["shape"][0] if t2d and len(t2d["shape"]) == 1 else None,
                    d2t["shape"][0] if d2t and len(d2t["shape"]) == 1 else None,
                    highest,
                )
        except (OSError, ValueError, UnicodeDecodeError, struct.error, KeyError, TypeError):
            continue
    return None


def _entry(entries: dict[str, Any], name: str) -> dict[str, Any] | None:
    for key, value in entries.items():
        if key.split(".")[-1] == name and isinstance(value, dict):
            return value
    return None


__all__ = ["DRAFT_TO_TARGET", "TARGET_TO_DRAFT", "TokenizerFacts", "VocabMaps", "read_maps", "read_tokenizer"]
