"""``patchkit export``: the change ``apply`` would write for some architectures, as a patch vLLM could merge.

The run is ``apply``'s own (:func:`patchkit.plan.run.decide`: the same selection, engine, codemods and gates, so
the same refusals), planned from the release's own bytes: every file patchkit journaled is planned from its
original (the journal's copy), with an empty journal, so an install patchkit already patched exports the same
patch as a pristine one. Nothing is written into the install. Each planned file is then put in upstream's style
(:func:`patchkit.plan.upstream_style.upstream_text`: no patchkit comment, the added lines wrapped to vLLM's line
length) and written as a git diff whose paths are relative to the site-packages folder, or to the checkout's root
with ``--source`` (both hold ``vllm/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patchkit.jsonable import jsonable
from patchkit.plan.arch_scope import originals_view
from patchkit.plan.gates import ChainCheck
from patchkit.plan.request import Request
from patchkit.plan.run import Decided, decide
from patchkit.plan.upstream_style import git_diff, upstream_text
from patchkit.results import InstallInfo, Outcome, PatchResult
from patchkit.store.journal import journal_for
from patchkit.vllm.registry.table import Registry
from patchkit.vllm.release.contract import UPSTREAM_LINE_LENGTH, install_info
from patchkit.vllm.release.install import Install
from patchkit.vllm.release.source import SourceTree
from patchkit.vllm.shapes.classify import classify


@dataclass(frozen=True)
class ExportReport:
    """What ``patchkit export`` made (frozen; the CLI writes ``patch`` and renders the rest).

    Attributes:
        info: the install (or checkout) exported against.
        architectures: the architectures the request covers; shapes: each one's shape as ``apply`` classified it
            (``standard-loop``, ``hidden-states-only``, ``interface-only``, ``wrapper-only``), on the release's bytes.
        results: every patch's outcome, as ``apply --dry-run`` gives it.
        files: the files the patch changes (relative to the root it applies in).
        patch: the git diff ("" when refused or when there is nothing to change).
        line_length: the limit the added lines were wrapped to.
        long_lines: ``path:line`` of each added line still over it (the wrapper could not split it).
        checked: the chain check's lines on the planned bytes (``label: ok|FAIL detail``), what was checked
            statically.
        source: exported against a checkout (``--source``), not an install.
        description: the pull-request description (:mod:`patchkit.plan.pr_description`; set by
            :func:`patchkit.api.export`), None when refused.
    """

    info: InstallInfo
    architectures: tuple[str, ...]
    shapes: dict[str, str]
    results: tuple[PatchResult, ...]
    files: tuple[str, ...]
    patch: str
    line_length: int = UPSTREAM_LINE_LENGTH
    long_lines: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()
    source: bool = False
    description: str | None = field(default=None)

    @property
    def refused(self) -> bool:
        """A patch of the run was refused (or not written because another was): nothing is exported."""
        return any(r.outcome in (Outcome.REFUSED, Outcome.NOT_WRITTEN) for r in self.results)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the run was refused: each refused patch's id and reason."""
        return tuple(f"{r.id}: {r.reason}" for r in self.results if r.outcome is Outcome.REFUSED)

    @property
    def exit_code(self) -> int:
        """3 when refused (nothing exported), else 0 (an empty patch too: nothing to change, said on stderr)."""
        return 3 if self.refused else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``export --json``; docs/json.md)."""
        data = jsonable(self)
        data.update(refused=self.refused, reasons=list(self.reasons), exit_code=self.exit_code)
        return data


def export(
    install: Install,
    *,
    request: Request,
    chain_check: ChainCheck,
    force: bool = False,
    source: bool = False,
) -> ExportReport:
    """Plan ``apply --arch/--model`` for ``request`` from the release's own bytes, and give it in upstream's style.

    Args:
        install: the install (``--site-packages``/``--python``) or checkout (``--source``) to export against.
        request: the ``--arch``/``--model`` architectures (at least one).
        chain_check: verify's chain check (:func:`patchkit.checks.verify.verify`), apply's last gate.
        force: as ``apply --force``: patch files that differ from RECORD, a hybrid not lossless on this release, a
            shape not shown under the release's runner (:mod:`patchkit.vllm.shapes.shown`).
        source: ``install`` is a checkout: no RECORD gate (its files are the base of the patch themselves).
    Returns:
        The :class:`ExportReport`: refused (``exit_code`` 3, empty ``patch``) wherever ``apply`` refuses.
    Raises:
        UsageError: an ``--arch`` the registry does not hold. ConfigError: ``--model`` without a readable
        ``config.json``. SourceError: a file does not parse. StateError: the journal or an original copy
        cannot be read.
    """
    journal = journal_for(install)
    rolled, _ = journal.rolled_back_view()
    base = journal.without_pending()
    overrides = {**rolled, **originals_view(base, str(install.version))}
    done = decide(
        install,
        base.forgotten(),
        None,
        requested=set(),
        force=force,
        request=request,
        chain_check=chain_check,
        overrides=overrides,
        record_gate=not source,
    )
    info = install_info(install, done.contract)
    shapes = _shapes(install, overrides, done)
    checked = _checked(done)
    refused = any(r.outcome in (Outcome.REFUSED, Outcome.NOT_WRITTEN) for r in done.final)
    if refused:
        return ExportReport(info, done.archs, shapes, tuple(done.final), (), "", checked=checked, source=source)
    chunks, long_lines = [], []
    for path, new in sorted(done.planned.changed.items()):
        encoding = done.planned.encodings.get(path, "utf-8")
        old_text = done.planned.originals[path].decode(encoding)
        new_text = upstream_text(old_text, new.decode(encoding), UPSTREAM_LINE_LENGTH)
        chunks.append(git_diff(path, old_text, new_text))
        long_lines.extend(_long_added(path, old_text, new_text))
    return ExportReport(
        info,
        done.archs,
        shapes,
        tuple(done.final),
        tuple(sorted(done.planned.changed)),
        "".join(chunks),
        long_lines=tuple(long_lines),
        checked=checked,
        source=source,
    )


def _shapes(install: Install, overrides: dict[str, bytes], done: Decided) -> dict[str, str]:
    """Each requested architecture's shape, classified on the bytes planned from (as ``apply`` classified it)."""
    if not done.archs or done.contract.protocol is None:
        return {}
    tree = SourceTree(install.site_packages, overrides=overrides)
    registry = Registry(tree)
    found = {arch: classify(tree, registry, done.contract, arch).shape for arch in done.archs}
    return {arch: shape.value for arch, shape in found.items() if shape is not None}


def _checked(done: Decided) -> tuple[str, ...]:
    """The chain check of the planned bytes, one line per check to two levels deep (what the description says was
    checked statically): ``label: ok|FAIL|info detail``, a nested one indented."""
    report = done.checked
    if report is None:
        return ()

    def line(check, depth: int) -> str:
        verdict = "info" if check.ok is None else "ok" if check.ok else "FAIL"
        return f"{'  ' * depth}{check.label}: {verdict} {check.detail}".rstrip()

    return tuple(line(c, d) for top in report.checks for c, d in ((top, 0), *((k, 1) for k in top.children)))


def _long_added(path: str, old: str, new: str) -> list[str]:
    """``path:line`` of each line of ``new`` that ``old`` lacks and that is over vLLM's line length."""
    before = set(old.splitlines())
    return [
        f"{path}:{n}"
        for n, line in enumerate(new.splitlines(), start=1)
        if len(line) > UPSTREAM_LINE_LENGTH and line not in before
    ]


__all__ = ["ExportReport", "export"]
