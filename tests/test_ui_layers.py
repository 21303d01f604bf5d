"""The interfaces layer (patchkit/ui) after its split (issue 19), offline.

- the ``--ray`` view no longer imports the CLI (the cycle ``cli`` <-> ``cluster_view``);
- no module of ``patchkit/ui`` (nor the entry point) is over 500 lines;
- a node's ``--ray`` answer is read once into typed values, and a plan another node stopped is
  held back through :func:`patchkit.plan.outcomes.held_back` with the JSON the driver printed before;
- exit codes are the reports' own (``exit_code``), not computed by the CLI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import patchkit
from patchkit.errors import ExitCode
from patchkit.results import (
    ApplyReport,
    InstallInfo,
    Outcome,
    PatchResult,
    Problem,
    RevertedFile,
    RevertReport,
    VerifyReport,
)
from patchkit.ui.cluster_report import NodeAnswer

PACKAGE = Path(patchkit.__file__).parent
INFO = InstallInfo("/sp", "0.17.1", "A1", "SupportsEagle3 Protocol", patchable=True)
RESULTS = (
    PatchResult("eagle3-a", Outcome.APPLIED, "ready", ("vllm/a.py",), "vllm/a.py:10 A"),
    PatchResult("eagle3-b", Outcome.ALREADY_APPLIED, "journaled", ("vllm/b.py",)),
    PatchResult("eagle3-c", Outcome.NOT_APPLICABLE, "not for 0.17.1"),
    PatchResult("eagle3-d", Outcome.APPLIED, "ready", ("vllm/d.py",), note="edited since"),
)


def test_the_ray_view_does_not_import_the_cli():
    # failed before the split: cluster_view imported _OUTCOME_STYLE, _emit_json and _out from patchkit.ui.cli
    code = "import sys, patchkit.ui.cluster_view; print('patchkit.ui.cli' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_no_interface_module_is_over_500_lines():
    # failed before the split: ui/cli.py had 1056 lines, ui/cluster.py 628
    files = [*sorted((PACKAGE / "ui").glob("*.py")), PACKAGE / "entry.py", PACKAGE / "__main__.py"]
    sizes = {f.name: len(f.read_text().splitlines()) for f in files}
    assert {name: n for name, n in sizes.items() if n > 500} == {}, sizes


def test_a_node_plan_held_back_is_its_plan_with_the_ready_patches_not_written():
    plan = ApplyReport(INFO, True, RESULTS, (), False).to_dict()
    answer = NodeAnswer.parse({"vllm_version": "0.17.1", "result": plan, "digest": None, "error": None})
    assert [p.outcome for p in answer.patches] == [r.outcome for r in RESULTS]
    assert not answer.refused and not answer.written and not answer.lost
    held = answer.held_back()
    # the dict rewrite the driver did before (cluster._not_written), field for field
    expected = {
        **plan,
        "patches": [{**p, "outcome": "not written"} if p["outcome"] == "applied" else p for p in plan["patches"]],
    }
    assert held.result == expected
    assert [p.outcome for p in held.patches] == [
        Outcome.NOT_WRITTEN,
        Outcome.ALREADY_APPLIED,
        Outcome.NOT_APPLICABLE,
        Outcome.NOT_WRITTEN,
    ]
    assert answer.result == plan  # the answer itself is unchanged
    lost = NodeAnswer.parse({"lost": True, "result": None, "error": {"message": "gone", "hint": "", "exit_code": 4}})
    assert lost.lost and lost.held_back() is lost and lost.patches == ()


def test_a_revert_answer_reads_its_files_and_a_verify_answer_its_verdict():
    revert = RevertReport(INFO, (RevertedFile("vllm/a.py", False, "edited", ("eagle3-a",), "blocking"),), True)
    answer = NodeAnswer.parse({"result": revert.to_dict()})
    assert answer.refused and answer.files[0].blocking and answer.files[0].patches == ("eagle3-a",)
    verify = VerifyReport(INFO, []).to_dict()
    assert NodeAnswer.parse({"result": verify}).in_effect
    assert not NodeAnswer.parse({"result": None}).in_effect


def test_exit_codes_are_the_reports_own():
    assert ApplyReport(INFO, False, RESULTS, (), True).exit_code is ExitCode.OK
    refused = (*RESULTS, PatchResult("eagle3-e", Outcome.REFUSED, "no anchor"))
    assert ApplyReport(INFO, False, refused, (), False, missing_files=("vllm/x.py",)).exit_code is ExitCode.REFUSED
    assert ApplyReport(INFO, False, RESULTS, (), True, missing_files=("vllm/x.py",)).exit_code is ExitCode.ENVIRONMENT
    assert VerifyReport(INFO, []).exit_code == ExitCode.OK
    problem = Problem("the runtime checks could not run", "give --python", int(ExitCode.ENVIRONMENT))
    assert VerifyReport(INFO, [], runtime_error=problem).exit_code == ExitCode.ENVIRONMENT
    assert RevertReport(INFO, (), True).exit_code is ExitCode.REFUSED
    assert RevertReport(INFO, (), False).exit_code is ExitCode.OK


def _steps_in(value, where="report"):
    """Every ``next_steps`` list anywhere in a JSON report, with where it was found."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "next_steps":
                yield where, item
            yield from _steps_in(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _steps_in(item, f"{where}[{i}]")


def test_every_reports_next_steps_have_one_json_shape():
    """Issue 25: the guard's ``next_steps`` (``guard install`` alone, and nested in apply, revert and
    status) lacked ``command`` and ``changes``; every report renders a step with NextStep.to_dict."""
    from patchkit.advice import Effect, NextStep, patchkit_argv
    from patchkit.guard import guard as guard_mod
    from patchkit.plugin_results import PluginAction
    from patchkit.results import StatusReport

    step = NextStep(patchkit_argv("apply", target="vllm", guard=True), "patches and guards", effect=Effect.PATCHES)
    shape = set(step.to_dict())
    assert {"argv", "command", "why", "effect", "changes"} <= shape
    guard = guard_mod.report(PluginAction.NOTHING_TO_GUARD, False, next_steps=(step,))
    reports = {
        "guard install": guard.to_dict(),
        "apply": ApplyReport(INFO, False, RESULTS, (), True, guard=guard, next_steps=(step,)).to_dict(),
        "verify": VerifyReport(INFO, [], next_steps=(step,)).to_dict(),
        "revert": RevertReport(INFO, (), True, guard=guard, next_steps=(step,)).to_dict(),
        "status": StatusReport(INFO, [], guard=guard, next_steps=(step,)).to_dict(),
    }
    for name, report in reports.items():
        found = list(_steps_in(report))
        assert found, name
        for where, steps in found:
            assert [set(s) for s in steps] == [shape], f"{name}: {where}"
            assert steps[0]["command"] == "patchkit apply --target vllm --guard" and steps[0]["changes"], where


def test_a_next_step_line_quotes_its_command_so_a_shell_reads_it_whole():
    """``run 'pip install 'vllm>=0.16.0''`` (seen in verify on 0.9.2 and 0.15.1 while regenerating
    docs/output.md) pasted into a shell drops the quotes around the specifier: ``>=`` redirects."""
    import shlex

    from patchkit.advice import Effect, NextStep

    upgrade = NextStep(("pip", "install", "vllm>=0.16.0"), "Kimi-K2.5 from 0.16.0", effect=Effect.UPGRADE)
    line = upgrade.line()
    assert line.endswith('''run "pip install 'vllm>=0.16.0'"'''), line
    assert shlex.split(line.split("run ", 1)[1]) == ["pip install 'vllm>=0.16.0'"]
    plain = NextStep(("patchkit", "verify", "--site-packages", "/tmp/sp"), "shows the chain")
    assert plain.line() == "run 'patchkit verify --site-packages /tmp/sp' (shows the chain)"
    spaced = NextStep(("patchkit", "verify", "--site-packages", "/tmp/my sp"), "shows the chain")
    inner = spaced.line().split("run ", 1)[1].rsplit(" (", 1)[0]
    assert shlex.split(shlex.split(inner)[0]) == list(spaced.argv)
