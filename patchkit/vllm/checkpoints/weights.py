"""A checkpoint's weight files, read without a tensor library: tensor names and safetensors headers.

A ``*.safetensors`` file is an 8-byte little-endian header length, a JSON object (tensor name ->
``dtype``, ``shape``, ``data_offsets``; plus ``__metadata__``), then the raw tensor bytes. A
PyTorch ``*.bin`` in the zip format holds a ``data.pkl`` whose string constants include the tensor
names. ``model.safetensors.index.json`` maps every tensor name to its shard (``weight_map``).

Only headers and pickles' opcodes are read (:mod:`pickletools` executes nothing); no tensor is
loaded, and no tensor library is imported.
"""

from __future__ import annotations

import json
import pickletools
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

SAFETENSORS_INDEX = "model.safetensors.index.json"
"""The index of a sharded safetensors checkpoint (its ``weight_map``: tensor name -> shard file)."""
MAX_HEADER_BYTES = 100_000_000
"""Largest safetensors JSON header patchkit reads; a larger length is taken as a damaged file."""


@dataclass(frozen=True)
class SafetensorsHeader:
    """The JSON header of one ``*.safetensors`` file.

    Attributes:
        entries: tensor name -> its header entry (``dtype``, ``shape``, ``data_offsets``);
            ``__metadata__`` is left out.
        data_start: byte offset of the tensor data in the file (``data_offsets`` count from here).
    """

    entries: dict[str, Any]
    data_start: int


def read_header(fh: BinaryIO) -> SafetensorsHeader | None:
    """The header of the safetensors file open in ``fh`` (at its start); None: not a readable header.

    None when the length prefix is short, the length is over :data:`MAX_HEADER_BYTES`, the header
    is not UTF-8 JSON (or nests too deeply for Python's decoder), or it is not a JSON object.

    Raises:
        OSError: reading ``fh`` fails.
    """
    head = fh.read(8)
    if len(head) != 8:
        return None
    (size,) = struct.unpack("<Q", head)
    if size > MAX_HEADER_BYTES:
        return None
    try:
        header = json.loads(fh.read(size).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    return SafetensorsHeader({k: v for k, v in header.items() if k != "__metadata__"}, 8 + size)


def safetensors_files(folder: Path) -> list[Path]:
    """The ``*.safetensors`` files in ``folder``, sorted by name."""
    return sorted(folder.glob("*.safetensors"))


def weight_names(folder: Path) -> set[str] | None:
    """Tensor names of the weights in ``folder`` (None: no weights patchkit can read there).

    Reads :data:`SAFETENSORS_INDEX`'s ``weight_map``, or each ``*.safetensors`` header (see
    :func:`read_header`), or the pickle of each ``*.bin`` in PyTorch's zip format (its string
    constants, listed with :mod:`pickletools`, which executes nothing). Never loads a tensor.
    Any file that cannot be read makes the answer None.
    """
    index = folder / SAFETENSORS_INDEX
    try:
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
            if isinstance(weight_map, dict):
                return set(weight_map)
        names: set[str] = set()
        safetensors = safetensors_files(folder)
        for file in safetensors:
            with file.open("rb") as fh:
                header = read_header(fh)
            if header is None:
                return None
            names |= set(header.entries)
        if safetensors:
            return names
        pickles = sorted(folder.glob("*.bin"))
        for file in pickles:
            with zipfile.ZipFile(file) as zf:
                member = next((m for m in zf.namelist() if m.endswith("/data.pkl") or m == "data.pkl"), None)
                if member is None:
                    return None
                data = zf.read(member)
            names |= {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}
        return names if pickles else None
    except (OSError, ValueError, UnicodeDecodeError, zipfile.BadZipFile, RecursionError):
        return None


__all__ = [
    "MAX_HEADER_BYTES",
    "SAFETENSORS_INDEX",
    "SafetensorsHeader",
    "read_header",
    "safetensors_files",
    "weight_names",
]
