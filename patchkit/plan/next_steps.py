"""What to run next, decided from a planned ``apply`` (a dry run) and from the journal: the next
steps doctor, verify, status and apply advise (:class:`patchkit.advice.NextStep`, issue 25).

Each step is decided from result fields (outcomes, patch ids, ``upgrade_to``), never from message
text, and each says what it will change, so ``tests/test_advised_commands.py`` can run it and
check that it does:

- :func:`after_dry_run`: after a dry run of ``apply`` with the options a command would advise,
  the ``apply`` that writes the patches it plans, or (when it would refuse) its dry run, which
  shows why and exits 3, or the release to upgrade to (a patch not applicable here that works
  from a later release, :attr:`patchkit.results.PatchResult.upgrade_to`);
- :func:`reapply`: after a reinstall or an upgrade replaced journaled files, the ``apply`` runs
  that patch them again;
- :func:`undo`: after an ``apply`` wrote, the ``revert`` that takes out exactly what it wrote.
"""

from __future__ import annotations

import os

from packaging.version import Version
from typing import TYPE_CHECKING, Sequence

from patchkit.advice import Effect, NextStep, patchkit_argv, reinstall
from patchkit.errors import ExitCode, UsageError
from patchkit.plan.request import Request
from patchkit.results import FORCED, ApplyReport, InstallInfo, Outcome
from patchkit.plan.spec import ClassTarget, Patch, load_patches
from patchkit.vllm.classes import loadpath
from patchkit.vllm.release.contract import EAGLE3_FIRST, Era

if TYPE_CHECKING:
    from patchkit.plan.gates import ChainCheck
    from patchkit.store.journal import Journal
    from patchkit.vllm.release.install import Install


def after_dry_run(report: ApplyReport, apply_argv: Sequence[str]) -> tuple[NextStep, ...]:
    """The next step after ``report``, a dry run of ``apply_argv`` (the ``patchkit apply ...`` to advise).

    Returns:
        One step: ``apply_argv`` when it would write patches (:attr:`Effect.PATCHES`, their ids);
        ``apply_argv --dry-run`` when it would refuse (:attr:`Effect.SHOWS`, exit 3, the first
        refusal's reason and place); an upgrade (:attr:`Effect.UPGRADE`) when a patch that is not
        applicable here works from a later release; else ``()`` (nothing to write).
    """
    argv = tuple(apply_argv)
    refused = [p for p in report.patches if p.outcome is Outcome.REFUSED]
    if refused:
        first = refused[0]
        return (
            NextStep(
                (*argv, "--dry-run"),
                f"apply would refuse, writing nothing: {first.id}: {first.reason}",
                first.target,
                Effect.SHOWS,
                (first.id,),
                int(ExitCode.REFUSED),
            ),
        )
    steps = []
    would = [p for p in report.patches if p.outcome is Outcome.APPLIED]
    if would:
        steps.append(
            NextStep(
                argv,
                f"writes {', '.join(p.id for p in would)}; add --dry-run to see the diff",
                would[0].target,
                Effect.PATCHES,
                tuple(p.id for p in would),
            )
        )
    later = [p for p in report.patches if p.outcome is Outcome.NOT_APPLICABLE and p.upgrade_to]
    if later:
        release = max(later, key=lambda p: p.upgrade_to).upgrade_to
        steps.append(
            upgrade(
                report.install.distribution,
                release,
                f"{', '.join(p.id for p in later)}: not applicable to vLLM {report.install.version}; "
                f"from vLLM {release} on it works",
                later[0].target,
                [p.id for p in later],
            )
        )
    return tuple(steps)


def for_verify(info: InstallInfo, request: Request, journaled: Sequence[str], target: str) -> tuple[NextStep, ...]:
    """What ``verify`` advises when EAGLE-3 is not in effect, established without planning (issue 32, finding 9).

    Without the ``SupportsEagle3`` Protocol (vLLM <= 0.10.1): upgrade. On a release that supports
    the default set natively, with no ``--arch``/``--model`` and nothing patched by one: reinstall
    (no shipped patch applies there, so only the release's own files put it back). Else the dry run
    of the ``apply`` with verify's own scope (``--arch``/``--model``; without them the default set,
    unless it is native, and ``--arch`` for the architectures the journal shows an ``--arch``/``--model`` run patched):
    it writes nothing and prints what that ``apply`` would write, or why it would refuse, and the
    ``apply`` it names is the same command without ``--dry-run``. verify does not plan it itself:
    planning imports libcst and took most of a failing verify (6.3 to 6.7 s before, 2.2 to 3.1 s
    after, on 0.17.1 under load); a read-only command
    imports none (``tests/test_startup.py``, ``docs/development.md`` rule 3).
    """
    if info.era == Era.A0:  # the first release where every patch of the default set works
        shipped = load_patches(target)
        release = str(max(Version(first_release(p)) for p in shipped))
        return (
            upgrade(
                info.distribution,
                release,
                f"patchkit cannot add EAGLE-3 to vLLM {info.version} "
                f"({info.era_description}); from vLLM {release} on every patch of the default set applies",
                patches=[p.id for p in shipped],
            ),
        )
    if info.native and not request and not journaled:
        return (
            reinstall(
                info.distribution,
                info.version,
                f"vLLM {info.version} supports EAGLE-3 for these models "
                "natively and patchkit has nothing to apply; the files above differ from the release",
            ),
        )
    default = [] if info.native else [Request()]  # natively supported: no shipped patch applies there
    runs = [request] if request else [*default, *([Request(tuple(journaled))] if journaled else [])]
    steps = []
    for run in runs:
        model = os.path.abspath(run.model) if run.model is not None else None
        argv = patchkit_argv("apply", target=target, architectures=run.architectures, model=model, extra=("--dry-run",))
        steps.append(
            NextStep(
                argv,
                "writes nothing: shows the patches apply would write here, or why it would "
                "refuse (exit 3); without --dry-run it writes them",
                None,
                Effect.SHOWS,
            )
        )
    return tuple(steps)


def for_forced(forced: Sequence[str], request: Request) -> NextStep:
    """The next step when what fails is only what ``apply --force`` accepted (issue 42, finding 1): ``forced``
    architectures (:attr:`patchkit.plan.arch_scope.Scope.forced`) fail ``verify`` and ``doctor`` on the serve's
    runner or a hybrid's mixers, and no patch changes that; the dry run of ``apply`` only refuses again. The
    step is the scoped ``revert`` that takes out what the forced run wrote (with the run's own ``--arch`` or
    ``--model``; else ``--arch`` for each forced architecture)."""
    model = os.path.abspath(request.model) if request.model is not None else None
    archs = request.architectures if request.architectures or model else tuple(forced)
    return NextStep(
        patchkit_argv("revert", architectures=archs, model=model),
        f"{', '.join(forced)}: {FORCED}, and nothing apply writes changes that on this serve; this revert takes "
        "out what apply --force wrote (keep it only if you serve it knowing verify fails it)",
        None,
        Effect.RESTORES,
    )


def without_refused(
    install: Install, request: Request, target: str, chain_check: ChainCheck, force: bool = False
) -> tuple[NextStep, ...]:
    """After a refused ``apply`` of several ``--arch``: the ``apply`` of the ones that do not refuse.

    A run is all or nothing, so one refused architecture stops the others. Each architecture is
    planned alone (:func:`patchkit.plan.run.dry_run`); those that refuse alone are dropped, and the
    rest is planned together: when that plan refuses nothing, the step is its ``apply``
    (:attr:`Effect.PATCHES`, the patches it writes). ``()`` when every architecture refuses, when
    none refuses alone (they refuse together), or with ``--model`` (its architectures come from
    its config.json).
    """
    from patchkit.plan.run import dry_run  # lazy: libcst, only after a refused apply of several --arch

    if request.model is not None or len(request.architectures) < 2:
        return ()
    alone = {
        a: dry_run(install, chain_check=chain_check, target=target, request=Request((a,)), force=force)
        for a in request.architectures
    }
    bad = [a for a, r in alone.items() if r.refused]
    rest = tuple(a for a in request.architectures if a not in bad)
    if not bad or not rest:
        return ()
    together = dry_run(install, chain_check=chain_check, target=target, request=Request(rest), force=force)
    if together.refused:
        return ()
    would = tuple(p.id for p in together.patches if p.outcome is Outcome.APPLIED)
    reason = next(p for p in alone[bad[0]].patches if p.outcome is Outcome.REFUSED)
    return (
        NextStep(
            patchkit_argv("apply", target=target, architectures=rest, force=force),
            f"applies the rest without --arch {' --arch '.join(bad)}, which refuses alone ({reason.id}: "
            f"{reason.reason})",
            reason.target,
            Effect.PATCHES,
            would,
        ),
    )


def first_release(patch: Patch) -> str:
    """The first vLLM release where ``patch`` works: the lower bound of its range, or later where vLLM's
    proposer cannot load a draft through its wrapper before (:data:`patchkit.vllm.classes.loadpath.FIXED_IN`)."""
    lower = [Version(s.version) for s in patch.vllm if s.operator in (">=", ">")] or [Version(EAGLE3_FIRST)]
    fixed = loadpath.FIXED_IN.get(patch.target.architecture) if isinstance(patch.target, ClassTarget) else None
    return str(max([*lower, *([Version(fixed)] if fixed else [])]))


def upgrade(
    distribution: str, release: str, why: str, rests_on: str | None = None, patches: Sequence[str] = ()
) -> NextStep:
    """``pip install 'DIST>=RELEASE'`` in the serving environment (:attr:`Effect.UPGRADE`); ``patches``:
    the patch ids that work from ``RELEASE`` on (empty: EAGLE-3 as a whole)."""
    return NextStep(("pip", "install", f"{distribution}>={release}"), why, rests_on, Effect.UPGRADE, tuple(patches))


def reapply(runs: Sequence[Sequence[str]], *, target: str = "vllm", model: str | None = None) -> tuple[NextStep, ...]:
    """The ``apply`` runs that patch replaced files again (:attr:`patchkit.results.StatusReport.reapply`).

    Args:
        runs: the ``--arch`` lists of the runs (``()``: the default set).
        model: the ``--model`` folder the guard's manifest recorded for the ``--arch`` run, which
            ``apply`` repeats instead of the ``--arch`` names (the guard's line names the same command).
    """
    steps = []
    for archs in runs:
        chosen = {"model": model} if archs and model else {"architectures": tuple(archs)}
        why = (
            "again for this release: the architectures patchkit's journal says an --arch/--model run patched"
            if archs
            else "again for this release: the default set"
        )
        steps.append(NextStep(patchkit_argv("apply", target=target, **chosen), why, effect=Effect.PATCHES))
    return tuple(steps)


def undo(install: Install, journal: Journal, request: Request, before: frozenset[str]) -> NextStep:
    """The ``revert`` that takes out exactly the patches an ``apply`` just wrote (issue 32).

    ``revert --arch``/``--model`` keeps the patches another patched architecture needs
    (:func:`patchkit.plan.arch_scope.narrowing`), and the journal records patch ids, not which run
    asked for them: after ``apply --model Kimi-K2.5`` on 0.17.1 the shipped DeepSeek patches it
    depends on (``deepseek_v2.py``, ``speculative.py``) also serve the DeepSeek architectures, so the
    scoped revert kept them. The scoped revert is advised when it takes out exactly the patches
    this apply added; else, when nothing was journaled before this apply, the whole ``revert``
    (everything journaled is this apply's); else the scoped revert, which says what it keeps.

    Args:
        install: the vLLM install.
        journal: its journal after the write.
        request: the apply's ``--arch``/``--model`` (empty: a plain ``apply``).
        before: the patch ids the journal held before this apply.
    Returns:
        A :attr:`Effect.RESTORES` step, ``patches`` the ids it takes out.
    Raises:
        SourceError: a file on the way does not parse.
    """
    from patchkit.plan import arch_scope  # lazy: the scope's planning chain, only after a write

    added = arch_scope.journaled_ids(journal) - before
    if not request:
        return NextStep(patchkit_argv("revert"), "undoes it", effect=Effect.RESTORES)
    try:
        remove = arch_scope.narrowing(install, journal, request).remove
    except UsageError:  # every patch it wrote serves another patched architecture too
        remove = frozenset()
    if remove == added:
        return NextStep(patchkit_argv("revert"), "undoes it", effect=Effect.RESTORES, patches=tuple(sorted(remove)))
    if not before:
        return NextStep(
            patchkit_argv("revert"), "undoes it", effect=Effect.RESTORES, patches=tuple(sorted(added)), whole=True
        )
    kept = sorted(added - remove)
    return NextStep(
        patchkit_argv("revert"),
        f"takes out what no other patched architecture needs; it keeps {', '.join(kept)}",
        effect=Effect.RESTORES,
        patches=tuple(sorted(remove)),
    )


__all__ = [
    "after_dry_run",
    "first_release",
    "for_forced",
    "for_verify",
    "reapply",
    "undo",
    "upgrade",
    "without_refused",
]
