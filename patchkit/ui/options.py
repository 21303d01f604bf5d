"""The options the commands share, the command classes that check the raw command line, and the
two calls every command makes with its options: find the install, build the request.

This module imports only Typer, the standard library and :mod:`patchkit.errors` /
:mod:`patchkit.ui.console` (start-up, issue 11).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from typer.core import TyperCommand

import difflib

from patchkit.advice import NextStep, patchkit_argv
from patchkit.errors import ExitCode, UsageError
from patchkit.sglang.contract import DISTRIBUTION as SGLANG
from patchkit.ui import hints
from patchkit.ui.console import error

if TYPE_CHECKING:
    from patchkit.plan.request import Request
    from patchkit.vllm.release.install import Install

TargetOpt = typer.Option("vllm", "--target", help="Distribution to patch (only 'vllm').")
"""``--target`` of the commands written for vLLM only (export, watch-install); they refuse 'sglang'."""
ReadTargetOpt = typer.Option("vllm", "--target", help="Distribution to read (only 'vllm').")
"""``--target`` of the reading commands written for vLLM only (list, rehearse)."""
ScanTargetOpt = typer.Option("vllm", "--target", help="Distribution to read: 'vllm', or 'sglang' (docs/sglang.md).")
"""``--target`` of the reading commands written for SGLang too (scan, verify, status, resolve, explain; issue 44)."""
PatchTargetOpt = typer.Option("vllm", "--target", help="Distribution to patch: 'vllm', or 'sglang' (docs/sglang.md).")
"""``--target`` of apply and revert, written for SGLang too (issue 44)."""
DoctorTargetOpt = typer.Option(
    "vllm", "--target", help="Distribution to read: 'vllm', or 'sglang' (needs --draft; docs/sglang.md)."
)
"""``doctor``'s ``--target``: written for SGLang too (issue 44, point 3)."""
SGLANG_COMMANDS = ("scan", "doctor", "apply", "verify", "revert", "status", "resolve", "explain")
"""The commands that accept ``--target sglang``; every other one refuses it (:func:`unwritten_target`)."""
WRITTEN = ", ".join(f"'{name}'" for name in SGLANG_COMMANDS)
"""The written commands as the refusal names them."""
KNOWN_TARGETS = ("vllm", SGLANG)
"""Every ``--target`` some command reads: vLLM (``patchkit.plan.spec.TARGETS``, the ones patchkit patches) and
SGLang (scan and doctor)."""
SitePackagesOpt = typer.Option(
    None, "--site-packages", help="Folder holding vllm/ (sglang/ with --target sglang) and its .dist-info."
)
PythonOpt = typer.Option(
    None,
    "--python",
    help="Interpreter of the environment that serves the model: a path, a name on PATH (python3), or a venv folder.",
)
JsonOpt = typer.Option(False, "--json", help="Print one JSON object (schema: docs/json.md).")
ArchOpt = typer.Option(
    None, "--arch", help="A registry architecture to patch/check (repeatable), e.g. Glm4MoeForCausalLM."
)
ModelOpt = typer.Option(
    None, "--model", help="A checkpoint folder: the architectures (and model type) in its config.json."
)
RayOpt = typer.Option(
    None,
    "--ray",
    metavar="[ADDRESS]",
    help="Run on every node of a Ray cluster (no ADDRESS: the one ray.init finds). Needs the 'ray' extra.",
)


_PATH_OPTIONS = (
    "--site-packages",
    "--python",
    "--model",
    "--draft",
    "--source",
    "--out",
    "--evidence",
    "--description",
)
"""The options naming a folder or file: an empty value is a usage error (:class:`Command`)."""


class Command(TyperCommand):
    """Every patchkit command: an empty path option (``--site-packages ""``) is a usage error.

    Click turns ``""`` into ``Path("")``, which is ``Path(".")``: an unset ``"$SP"`` would act on
    whatever is in the current folder. The raw arguments are checked before Click parses them;
    the error is one line and a hint (one JSON object with ``--json``), exit 2.
    """

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        for i, arg in enumerate(args):
            if arg == "--":
                break
            name, eq, value = arg.partition("=")
            empty = (eq and not value) if eq else (arg in _PATH_OPTIONS and i + 1 < len(args) and args[i + 1] == "")
            if name in _PATH_OPTIONS and empty:
                error(
                    UsageError(
                        f"{name} was given an empty path",
                        f'give {name} a folder or file (an unset shell variable expands to ""; '
                        "'.' names the current folder)",
                    ),
                    "--json" in args,
                )
                raise typer.Exit(int(ExitCode.USAGE))
        repeated = _repeated_single(self.params, args)
        if repeated is not None:
            error(repeated, "--json" in args)
            raise typer.Exit(int(ExitCode.USAGE))
        rest = super().parse_args(ctx, _python_files(args))
        # a refusal's step repeats --python / --site-packages as given, and patchkit as it was run
        hints.begin(ctx.params.get("site_packages"), ctx.params.get("python"), None, None, False)
        hints.given["target"] = ctx.params.get("target")
        unwritten = unknown_target(ctx.params.get("target")) or unwritten_target(
            _command_words(ctx), ctx.params.get("target")
        )
        if unwritten is not None:
            error(unwritten, "--json" in args)
            raise typer.Exit(int(ExitCode.USAGE))
        return rest


def _command_words(ctx) -> str:
    """The command as typed after ``patchkit`` (``guard install``), from Click's context chain."""
    words = []
    while ctx is not None and ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(words))


def unwritten_target(command: str | None, target: object) -> UsageError | None:
    """The error for ``--target sglang`` on a command not written for SGLang (all but :data:`SGLANG_COMMANDS`),
    else None. Raised before the command's body runs, so nothing is read or written (exit 2, ``USAGE``)."""
    if target != SGLANG or command in SGLANG_COMMANDS:
        return None
    return UsageError(
        f"--target {SGLANG}: '{command}' is not written for SGLang yet; only {WRITTEN} are (issue 44)",
        "",
        NextStep(patchkit_argv("scan", target=SGLANG), "each architecture's EAGLE-3 state; docs/sglang.md"),
    )


def unknown_target(target: object) -> UsageError | None:
    """The error for a ``--target`` no command reads (a typo), naming the close one; else None (exit 2)."""
    if not isinstance(target, str) or target in KNOWN_TARGETS:
        return None
    close = difflib.get_close_matches(target.lower(), KNOWN_TARGETS, n=1, cutoff=0.7)
    return UsageError(
        f"unknown --target {target!r}" + (f": did you mean {close[0]!r}?" if close else ""),
        f"known targets: vllm, {SGLANG} ({', '.join(SGLANG_COMMANDS)} only; docs/sglang.md)",
    )


def _python_files(args: list[str]) -> list[str]:
    """``args`` with a ``--python ./NAME`` made absolute: Click's ``Path("./python3")`` is ``python3``, which
    :func:`patchkit.interpreter.interpreter_path` rightly takes for a command on ``PATH``, as a
    shell would; the user named the file here (issue 42, finding 10, held-back input: ``--python ./python3``
    probed PATH's python3). Every other value is left as typed."""
    out = list(args)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if not eq:
            name, value = (args[i - 1], arg) if i > 0 else ("", arg)
        if name == "--python" and "/" in value and "/" not in str(Path(value)):
            out[i] = f"--python={Path(value).absolute()}" if eq else str(Path(value).absolute())
    return out


def _repeated_single(params, args: list[str]) -> UsageError | None:
    """The error for an option that takes one value given more than once (``--model A --model B``), else None.

    Click keeps the last value of such an option and drops the others without a word (issue 42,
    finding 8: ``apply --model A --model B`` patched B alone). The repeatable options (``--arch``,
    ``--patch``: ``multiple``) and flags are left to Click.
    """
    single = {
        opt: p.opts[-1]
        for p in params
        if p.param_type_name == "option" and not p.multiple and not p.is_flag and p.nargs == 1
        for opt in (*p.opts, *p.secondary_opts)
    }
    seen: dict[str, int] = {}
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name = arg.partition("=")[0] if arg.startswith("--") else arg
        if name in single and not (i > 0 and args[i - 1] in single and "=" not in args[i - 1]):
            seen[single[name]] = seen.get(single[name], 0) + 1
    for name, count in seen.items():
        if count > 1:
            more = (
                "; to check several architectures give --arch once per architecture"
                if name == "--model" and "--arch" in {o for p in params for o in getattr(p, "opts", ())}
                else ""
            )
            return UsageError(
                f"{name} was given {count} times; it takes one value",
                f"give {name} once (run the command once per value{more})",
            )
    return None


class RayCommand(Command):
    """A command whose ``--ray`` may come without a value: then it means ``auto`` (what ``ray.init`` finds).

    Typer has no option with an optional value, so a bare ``--ray`` (last, or before another
    option) gets ``auto`` inserted before Click parses the line.
    """

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                args.insert(i + 1, "auto")
                break
        return super().parse_args(ctx, args)


def request(arch: Optional[list[str]], model: Optional[Path]) -> Request:
    """The :class:`~patchkit.plan.request.Request` for ``--arch`` / ``--model``."""
    from patchkit.plan.request import Request  # lazy: the planning layer, which list does not need

    return Request(tuple(arch or ()), model)


def find_install(target: str, site_packages: Optional[Path], python: Optional[Path]) -> Install:
    """The install the environment options name (at most one of them; neither: patchkit's own environment).

    Raises:
        UsageError: an unknown ``--target``, or both ``--site-packages`` and ``--python``.
        EnvironmentProblem: no usable vLLM there (:func:`patchkit.vllm.release.install.locate`).
    """
    from patchkit.plan.spec import check_target  # lazy: the patch catalogue is read only by commands on an install
    from patchkit.vllm.release.install import locate  # lazy: as above

    check_target(target)
    if site_packages is not None and python is not None:
        raise UsageError("give --site-packages or --python, not both", "--python finds the site-packages itself")
    return locate(site_packages=site_packages, python=python)
