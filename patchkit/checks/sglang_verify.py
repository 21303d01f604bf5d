"""``verify --target sglang``: is EAGLE-3 in effect for each architecture patchkit patched (or ``--arch`` names)?

For each architecture (issue 44): ``native`` and never patched is in effect as SGLang ships it; one this patch
journaled must still hold patchkit's bytes (the journal's ``sha256_after``) and its whole chain
(:func:`patchkit.plan.sglang_chain.chain`: each link as the release's own ``llama.py`` has it); anything else is not
in effect. Nothing is written. Exit 0 when every architecture is in effect, 1 when one is not
(:class:`~patchkit.errors.ExitCode`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from patchkit.errors import ExitCode
from patchkit.plan.sglang_apply import journal_of, load_patch, registered, relpath
from patchkit.plan.sglang_chain import Link, chain
from patchkit.sglang import contract as c
from patchkit.sglang.drafts import reference_shift
from patchkit.sglang.classes import Package
from patchkit.sglang.install import SglangInstall
from patchkit.sglang.registry import entries, not_generative
from patchkit.sglang.scan import SglangScan
from patchkit.sglang.states import State, classify
from patchkit.store.files import sha256


GONE = "or its class is gone (reinstalled?)"
"""What verify says of a journaled class whose file or class the install no longer has."""


@dataclass(frozen=True)
class Verdict:
    """One architecture: ``state`` (native, patched, missing, ...), whether EAGLE-3 is in effect, and its links."""

    architecture: str
    state: str
    ok: bool
    path: str | None
    links: tuple[Link, ...]

    def to_dict(self) -> dict:
        return {
            "architecture": self.architecture,
            "state": self.state,
            "in_effect": self.ok,
            "file": self.path,
            "checks": [{"label": k.label, "ok": k.ok, "detail": k.detail} for k in self.links],
        }


@dataclass(frozen=True)
class VerifyReport:
    """``verify --target sglang``'s result."""

    install: SglangInstall
    verdicts: tuple[Verdict, ...]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.verdicts and all(v.ok for v in self.verdicts) else ExitCode.NOT_IN_EFFECT

    def to_dict(self) -> dict:
        return {
            "command": "verify",
            "target": c.DISTRIBUTION,
            "version": str(self.install.version),
            "in_effect": self.exit_code is ExitCode.OK,
            "architectures": [v.to_dict() for v in self.verdicts],
        }


def patched(install: SglangInstall) -> dict[str, str]:
    """The architectures this patch journaled in ``install``, each with its file (below site-packages)."""
    prefix = load_patch().id + ":"
    return {
        p.removeprefix(prefix): path
        for path, entry in journal_of(install).entries.items()
        for p in entry.patches
        if p.startswith(prefix)
    }


def verify(install: SglangInstall, architectures: list[str] | None = None) -> VerifyReport:
    """Check the architectures patchkit patched, or ``architectures`` when given.

    Raises:
        UsageError: an architecture the registry does not hold.
    """
    package = Package(install.site_packages, c.PACKAGE)
    mine = patched(install)
    journal = journal_of(install)
    listed = {e.architecture for e in entries(package)}
    wanted = list(architectures or mine)
    # a journaled class the registry no longer holds (its file gone) is not in effect; a name typed must be registered
    chosen = registered(package, [a for a in wanted if a in listed or architectures])
    gone = [a for a in wanted if a not in chosen]
    pooling = not_generative(package, c.GENERATION_CONFIG, c.GENERATION_FUNCTION)
    reference = package.path(c.REFERENCE_MODULE)
    unchecked = reference_shift(package)  # the chain is compared with llama.py: only as good as llama.py's ids
    shift = Link(f"the reference's ids + {c.ID_SHIFT}, as qualified", not unchecked, unchecked or "as qualified")
    out = [
        Verdict(a, "patched", False, mine[a], (Link("file holds patchkit's bytes", False, f"{mine[a]} {GONE}"),))
        for a in gone
    ]
    for arch, entry in chosen.items():
        row = classify(package, entry, pooling)
        path = relpath(install, package, entry.cls.module) if entry.cls else None
        if arch not in mine:
            ok = row.state is State.NATIVE
            why = "as SGLang ships it" if ok else "not patched: run patchkit apply --target sglang --arch " + arch
            out.append(Verdict(arch, row.state.value, ok, path, (Link("EAGLE-3 in the class", ok, why),)))
            continue
        file = install.site_packages / mine[arch]
        if not file.is_file() or entry.cls is None:
            lost = Link("file holds patchkit's bytes", False, f"{mine[arch]} {GONE}")
            out.append(Verdict(arch, "patched", False, mine[arch], (lost,)))
            continue
        data = file.read_bytes()
        same = sha256(data) == journal.entries[mine[arch]].sha256_after
        held = Link("file holds patchkit's bytes", same, "as written" if same else "changed since patchkit wrote it")
        links = (held, *chain(data, entry.cls.name, reference.read_bytes() if reference else b""), shift)
        out.append(Verdict(arch, "patched", all(k.ok for k in links), mine[arch], links))
    return VerifyReport(install, tuple(out))


def journaled(report: SglangScan) -> SglangScan:
    """``report`` with each native row this patch journaled marked ``patched`` (``scan --target sglang``): the class
    is native because patchkit wrote its setter. A journaled row that is no longer native (edited since) keeps its
    state; ``verify`` names what broke."""
    mine = patched(report.install)
    if not mine:
        return report
    rows = tuple(
        replace(r, state=State.PATCHED, reason=f"patched by patchkit ({load_patch().id}); {r.reason}")
        if r.architecture in mine and r.state is State.NATIVE
        else r
        for r in report.rows
    )
    return replace(report, rows=rows)


__all__ = ["Verdict", "VerifyReport", "journaled", "patched", "verify"]
