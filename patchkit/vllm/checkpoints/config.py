"""A checkpoint's ``config.json`` as doctor reads it, and what doctor knows about the target.

Reads local files only; never downloads and never imports vLLM or transformers.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import ConfigError
from patchkit.vllm.registry.table import Resolution
from patchkit.vllm.release.source import ClassRef

CONFIG_FILE = "config.json"
"""The file doctor reads in each checkpoint folder."""


@dataclass(frozen=True)
class CheckpointConfig:
    """A checkpoint's ``config.json``.

    Attributes:
        path: the ``config.json`` file read.
        data: its parsed JSON object.
    """

    path: Path
    data: dict[str, Any]


def read_config(location: Path, option: str) -> CheckpointConfig:
    """Read ``config.json`` from a checkpoint folder (or the file itself); never downloads.

    Args:
        location: a local checkpoint folder holding ``config.json``, or the JSON file itself.
        option: the command-line option it came from (``"--model"``, ``"--draft"``), for messages.
    Returns:
        The parsed :class:`CheckpointConfig`.
    Raises:
        ConfigError: the path does not exist, holds no ``config.json``, cannot be read, is not
            valid JSON (or nests too deeply for Python's decoder), or is not a JSON object (exit 4,
            for ``doctor`` and for ``--model`` on every command alike).
    """
    location = Path(location).expanduser()
    # a folder named config.json without one inside is the file given, and a folder (issue 42, finding 10)
    given_as_file = location.name == CONFIG_FILE and not os.path.lexists(location / CONFIG_FILE)
    if location.is_dir() and not given_as_file:
        file = location / CONFIG_FILE
    elif location.is_file() or os.path.lexists(location):
        file = location  # a FIFO or a device given as the file: named below as what it is
    else:
        text = str(location)
        looks_like_repo = text.count("/") == 1 and not text.startswith((".", "/", "~"))
        hint = (
            f"patchkit reads local files and never downloads; fetch the config first, e.g. "
            f"'huggingface-cli download {text} config.json --local-dir DIR', then {option} DIR"
            if looks_like_repo
            else f"give the local checkpoint folder that holds {CONFIG_FILE}"
        )
        raise ConfigError(f"{option} {location} does not exist", hint)
    if not file.is_file() and os.path.lexists(file):  # issue 42, finding 10: not "has no config.json"
        raise ConfigError(
            f"{option} {file} is {_file_kind(file)}, not a file",
            f"{CONFIG_FILE} must be the checkpoint's JSON file itself",
        )
    if not file.is_file():
        raise ConfigError(
            f"{option} {location} has no {CONFIG_FILE}",
            f"give the checkpoint folder itself (the one with {CONFIG_FILE} and the weights)",
        )
    try:
        text = file.read_text(encoding="utf-8-sig")  # a byte-order mark some editors write is not JSON
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}", "check that the file is readable UTF-8 JSON"
        ) from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"{file} is not valid JSON: {exc}", "the file may be truncated; download the checkpoint's config.json again"
        ) from exc
    except RecursionError:  # json's decoder recurses per nesting level
        raise ConfigError(
            f"{file} nests its JSON too deeply to read (no model config does)",
            "download the checkpoint's config.json again",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{file} holds a JSON {type(data).__name__}, not an object",
            f"{option} must point at a Hugging Face model config.json",
        )
    check_layer_count(file, data)
    return CheckpointConfig(file, data)


def _file_kind(path: Path) -> str:
    """What ``path`` is when it is not a regular file, in words (``a directory``, ``a FIFO``, ...)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a broken symbolic link"
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    kinds += ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


MAX_LAYER_COUNT = 10_000
"""More layers than any model config holds (the largest have a few hundred): a larger count is damage."""


def check_layer_count(file: Path, data: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` (exit 4) when the config's layer count is not an integer from 1 to
    :data:`MAX_LAYER_COUNT`: ``32.0``, ``true``, ``NaN``, ``"61"``, ``0``, ``1e30``, ``10**30``.

    The one check of the layer count, at the boundary: :func:`read_config` runs it, so ``doctor``,
    ``rehearse`` and ``--model`` on every command refuse the same config the same way (issue 42,
    finding 7: ``apply --model`` took ``32.0`` and rehearse kept building a miniature of 10**30 layers).
    Both the top level and the nested ``text_config`` are checked (vLLM reads the text config's).
    """
    for where, part in (("num_hidden_layers", data), ("text_config.num_hidden_layers", data.get("text_config"))):
        layers = part.get("num_hidden_layers") if isinstance(part, dict) else None
        if layers is None or (as_int(layers) is not None and 1 <= layers <= MAX_LAYER_COUNT):
            continue
        raise ConfigError(
            f"{file}: {where} is {_shown(layers)}, not a positive layer count"
            + (f" (at most {MAX_LAYER_COUNT:,})" if as_int(layers) is not None and layers > 1 else ""),
            "the checkpoint's config.json is damaged or was edited; download its config.json again",
        )


def _shown(value: Any) -> str:
    """``value`` as JSON (``NaN`` as Python's json writes it), cut to 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def text_config(data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The text (language-model) part of a model config, as vLLM's ``hf_text_config`` sees it.

    Fact (vLLM 0.17.1 ``transformers_utils/config.py`` ``get_hf_text_config``): vLLM uses the
    Transformers config's ``get_text_config()``, which returns the nested ``text_config`` when a
    (multimodal) config has one, else the config itself. Other nestings (``language_config``) are
    not followed here.

    Args:
        data: a parsed ``config.json``.
    Returns:
        ``(text config dict, "text_config" or None when it is the top level)``.
    """
    nested = data.get("text_config")
    if isinstance(nested, dict):
        return nested, "text_config"
    return data, None


def as_int(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_int_list(value: Any) -> list[int] | None:
    """``value`` as a list when it is a JSON list of integers, else None."""
    if isinstance(value, (list, tuple)) and all(as_int(v) is not None for v in value):
        return list(value)
    return None


@dataclass
class TargetFacts:
    """What doctor read about the target checkpoint and how this vLLM resolves it.

    Attributes:
        config: path of the ``config.json`` read.
        architectures: its ``architectures`` list.
        architecture: the first of them that resolves to a native vLLM class (None: none does).
        resolution: that architecture's registry row and class.
        model_type: the top-level ``model_type``.
        text_model_type: ``model_type`` of the text config (what the allow-list is matched against).
        text_config: ``"text_config"`` when the text config is nested, else None.
        num_hidden_layers: the text config's layer count ``n`` (None when absent).
        hidden_size: the text config's hidden size, in elements per token (None when absent).
        vocab_size: the text config's vocabulary size, in tokens (None when absent).
        multimodal: the resolved class derives from ``SupportsMultiModal`` (None: not resolved).
    """

    config: str
    architectures: list[str]
    architecture: str | None = None
    resolution: Resolution | None = None
    model_type: str | None = None
    text_model_type: str | None = None
    text_config: str | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    multimodal: bool | None = None

    @property
    def cls(self) -> ClassRef | None:
        """The resolved class (one of vLLM's own models), or None."""
        return self.resolution.cls if self.resolution is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        cls = self.cls
        return {
            "config": self.config,
            "architectures": self.architectures,
            "architecture": self.architecture,
            "own_model": cls is not None,
            "class": cls.name if cls else None,
            "file": cls.relpath if cls else None,
            "line": cls.lineno if cls else None,
            "model_type": self.model_type,
            "text_model_type": self.text_model_type,
            "text_config": self.text_config,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "multimodal": self.multimodal,
        }


__all__ = ["CONFIG_FILE", "CheckpointConfig", "TargetFacts", "as_int", "as_int_list", "read_config", "text_config"]
