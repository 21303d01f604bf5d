"""What a command was asked about: the ``--arch`` names and the ``--model`` checkpoint, checked first.

A :class:`Request` holds what the command line asked for; :func:`check_requested` refuses an
``--arch`` name the release's registry does not hold (a usage error, on every command, with the
closest names: :func:`not_registered`); :func:`read_model_config` reads what ``--model``'s
``config.json`` says. Nothing here reads more of the release than its registry, so the read-only
commands load it without the planning modules.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from patchkit.vllm.registry.table import Registry


@dataclass(frozen=True)
class Request:
    """Which architectures a command is about: ``--arch`` names and ``--model DIR``.

    Attributes:
        architectures: registry names given with ``--arch`` (repeatable).
        model: a checkpoint folder given with ``--model`` (its ``config.json`` names architectures,
            ``text_config`` included, and the model type).
    """

    architectures: tuple[str, ...] = ()
    model: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.architectures) or self.model is not None


@dataclass(frozen=True)
class ModelConfig:
    """What a checkpoint's ``config.json`` says that patchkit needs.

    Attributes:
        path: the file read.
        architectures: its ``architectures`` list.
        model_type: ``text_config.model_type`` when present, else ``model_type`` (what vLLM's
            ``hf_text_config.model_type`` is, which the allow-list is matched against).
        text_architectures: ``text_config.architectures`` (the language model a wrapper builds
            through the registry at run time), possibly empty.
    """

    path: str
    architectures: tuple[str, ...]
    model_type: str | None
    text_architectures: tuple[str, ...]


def read_model_config(model_dir: Path) -> ModelConfig:
    """Read ``model_dir/config.json`` (a BOM is allowed) with doctor's reader
    (:func:`patchkit.vllm.checkpoints.config.read_config`).

    Raises:
        ConfigError: the folder or file is missing, unreadable, not JSON, not an object, or names
            no architectures (exit 4, as for ``doctor``).
    """
    from patchkit.vllm.checkpoints.config import (
        read_config,
    )  # lazy: start-up, 'status' without --model reads no config.json

    cfg = read_config(Path(model_dir), "--model")
    path, data = cfg.path, cfg.data
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    listed = data.get("architectures")
    archs = tuple(a for a in listed if isinstance(a, str)) if isinstance(listed, list) else ()
    if not archs:
        raise ConfigError(f"{path} has no 'architectures' list", "pass --arch NAME instead")
    model_type = text.get("model_type") or data.get("model_type")
    listed = text.get("architectures")
    text_archs = tuple(a for a in listed if isinstance(a, str)) if isinstance(listed, list) else ()
    return ModelConfig(str(path), archs, model_type if isinstance(model_type, str) else None, text_archs)


def check_architecture(architecture: str) -> None:
    """Raise :class:`UsageError` for an architecture name that cannot be one (empty, or with spaces).

    vLLM's registry keys are Python class names (``DeepseekV2ForCausalLM``).
    """
    if not architecture.strip() or any(ch.isspace() for ch in architecture):
        raise UsageError(
            f"{architecture!r} is not an architecture name",
            'give a class name from the checkpoint\'s config.json "architectures", e.g. DeepseekV3ForCausalLM',
        )


def suggestions(registry: Registry, architecture: str) -> list[str]:
    """Registry names for what was given: a case slip or one-letter typo, a family or model type
    (``gemma3``, ``glm4_moe``, ``deepseek_v3``), or stray spaces.

    In order: the architectures of a shipped family whose model types include the name
    (``patches/eagle3_families.py``: ``kimi_k2`` -> ``DeepseekV3ForCausalLM``), names that start with
    (then contain) it with ``_``/``-`` dropped, then difflib's close matches (cutoff 0.9).

    Returns:
        Up to three registered names (empty when none fits).
    """
    from patchkit.plan.spec import load_families  # lazy: the patch definitions, only for a name the registry lacks
    from patchkit.vllm.registry.table import TARGET_GROUPS  # lazy: as above

    given = architecture.strip().lower()
    bare = given.replace("_", "").replace("-", "")
    by_lower = {a.lower(): a for a in registry.entries if registry.group_of(a, TARGET_GROUPS) is not None}
    found: list[str] = [by_lower[given]] if given in by_lower else []
    found += [a for f in load_families() if given in f.model_types for a in f.architectures if a in registry.entries]
    if len(bare) >= 3:
        found += [a for low, a in by_lower.items() if low.startswith(bare)]
        found += [a for low, a in by_lower.items() if bare in low]
    found += [by_lower[c] for c in difflib.get_close_matches(given, list(by_lower), n=3, cutoff=0.9)]
    return list(dict.fromkeys(found))[:3]


def check_requested(registry: Registry, request: Request, version: str) -> None:
    """Raise :class:`UsageError` for an ``--arch`` name this release's registry does not hold.

    ``apply``, ``verify``, ``status`` and ``revert`` call it before they plan or read anything
    else, so a typo (``DeepseekV3ForCausalLm``, a trailing space, an empty name) is a usage error
    on every command (exit 2, with the closest registered names), never a check that passes
    because there was nothing to check. ``--model``'s config.json gets the same answer when
    none of its ``architectures`` is registered (vLLM serves the first one its registry resolves;
    with none, ``verify`` and ``status`` would otherwise report on a class they never checked).

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        request: the ``--arch`` names, and ``--model``: its ``config.json`` is read here, so a bad one
            is the same error on every command (even ``revert`` with nothing to revert).
        version: the vLLM release, for the message.
    Raises:
        UsageError: an ``--arch`` name the registry does not hold, or a ``--model`` whose
            ``architectures`` name nothing it holds (the first is named, with the closest names).
        ConfigError: ``--model``'s ``config.json`` is missing or unreadable (exit 4).
    """
    if request.model is not None:  # read first: a bad config.json is the same error on every command
        names = read_model_config(request.model).architectures
        if not any(registry.resolve(a) is not None for a in names):
            raise not_registered(registry, names[0], version, "--model's config.json architecture")
    for name in request.architectures:
        if registry.resolve(name) is not None:
            continue
        if not name.strip():
            raise UsageError(
                "--arch '' is not an architecture name",
                'give a class name from the checkpoint\'s config.json "architectures", e.g. DeepseekV3ForCausalLM',
            )
        raise not_registered(registry, name, version, "--arch")


def not_registered(
    registry: Registry, name: str, version: str, given: str, env: str = "", model_type: str | None = None
) -> UsageError:
    """The error for an architecture name this release's registry does not hold (exit 2).

    One message for every command: ``--arch`` names (:func:`check_requested`) and the
    ``architectures`` of ``rehearse --model``'s ``config.json``.

    Args:
        registry: the install's model registry (``vllm/model_executor/models/registry.py``, read statically).
        name: the architecture name as given.
        version: the vLLM release, for the message.
        given: where the name came from (``--arch``, ``--model's config.json architectures``).
        env: the environment options the user gave (`` --python PY``), repeated in the hint.
        model_type: the checkpoint's model type: the architectures its shipped family names come
            first (``glm4_moe`` -> ``Glm4MoeForCausalLM``, ``patches/eagle3_families.py``).
    Returns:
        A :class:`UsageError` naming ``name``, with the closest registered names (:func:`suggestions`).
    """
    close = list(
        dict.fromkeys([*(suggestions(registry, model_type) if model_type else []), *suggestions(registry, name)])
    )[:3]
    scan = NextStep(
        patchkit_argv("scan", environment=shlex.split(env)), "it lists the architectures this vLLM registers"
    )
    return UsageError(
        f"{given} {name!r} is not in vLLM {version}'s model registry",
        f"did you mean {' or '.join(close)}" if close else "",
        scan,
    )


__all__ = [
    "ModelConfig",
    "Request",
    "check_architecture",
    "check_requested",
    "not_registered",
    "read_model_config",
    "suggestions",
]
