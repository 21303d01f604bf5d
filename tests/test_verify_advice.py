"""What a failing ``verify`` advises, decided without planning (issue 32, finding 9): an upgrade below the
SupportsEagle3 Protocol, a reinstall where the default set is native and nothing else was patched, else
the dry run of the ``apply`` in verify's scope (the default set on a release patchkit patches, and the
architectures the journal shows patched). Each is run against real releases in
``tests/test_advised_commands.py``; these hold the decision itself, offline."""

from __future__ import annotations

import os
import sys
import subprocess

from patchkit.advice import Effect
from patchkit.plan.next_steps import for_verify
from patchkit.plan.request import Request
from patchkit.results import InstallInfo

A0 = InstallInfo("/sp", "0.9.2", "A0", "no SupportsEagle3 Protocol")
A1 = InstallInfo("/sp", "0.17.1", "A1b", "SupportsEagle3", patchable=True)
A3 = InstallInfo("/sp", "0.33.0", "A3", "SupportsEagle3, EagleModelMixin", native=True)
GLM = "Glm4MoeForCausalLM"


def argvs(steps) -> list[list[str]]:
    return [list(s.argv) for s in steps]


def test_below_the_protocol_the_advice_is_an_upgrade():
    (step,) = for_verify(A0, Request(), (), "vllm")
    assert step.effect is Effect.UPGRADE and step.argv[:2] == ("pip", "install")


def test_on_a_native_release_with_nothing_patched_the_advice_is_a_reinstall():
    (step,) = for_verify(A3, Request(), (), "vllm")
    assert step.effect is Effect.REINSTALLS and step.argv[-1] == "vllm==0.33.0"


def test_on_a_native_release_only_the_journaled_architectures_are_dry_run():
    """The default set is native there: its dry run would show nothing to write, so it is not advised."""
    steps = for_verify(A3, Request(), (GLM,), "vllm")
    assert argvs(steps) == [["patchkit", "apply", "--target", "vllm", "--arch", GLM, "--dry-run"]]
    assert [s.effect for s in steps] == [Effect.SHOWS] and steps[0].exit_code == 0


def test_on_a_patched_release_the_default_set_and_the_journaled_architectures_are_dry_run():
    steps = for_verify(A1, Request(), (GLM,), "vllm")
    assert argvs(steps) == [
        ["patchkit", "apply", "--target", "vllm", "--dry-run"],
        ["patchkit", "apply", "--target", "vllm", "--arch", GLM, "--dry-run"],
    ]


def test_a_requested_scope_is_dry_run_as_asked(tmp_path):
    (by_arch,) = for_verify(A3, Request((GLM,)), (), "vllm")
    assert list(by_arch.argv) == ["patchkit", "apply", "--target", "vllm", "--arch", GLM, "--dry-run"]
    (by_model,) = for_verify(A1, Request(model=str(tmp_path)), ("OlmoeForCausalLM",), "vllm")
    assert list(by_model.argv) == [
        "patchkit",
        "apply",
        "--target",
        "vllm",
        "--model",
        os.path.abspath(tmp_path),
        "--dry-run",
    ]


def test_deciding_the_advice_imports_no_libcst():
    probe = (
        "import sys; from patchkit.plan.next_steps import for_verify; from patchkit.plan.request import Request; "
        "from patchkit.results import InstallInfo; "
        "for_verify(InstallInfo('/sp', '0.17.1', 'A1b', 'x', patchable=True), Request(), ('X',), 'vllm'); "
        "print('libcst' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
