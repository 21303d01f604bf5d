"""``status``, ``apply --dry-run``, ``revert --arch`` and ``resolve`` with ``--target sglang``, on real SGLang 0.5.23
release files (issue 44).

One patched copy per module (:func:`patched`: ``MixtralForCausalLM`` and ``Exaone4ForCausalLM`` applied, each in its
own file), and one unpatched copy (:func:`unpatched`); each test works on a hard-linked copy of one of them
(``cp -al``: patchkit replaces files by renaming, so the prepared trees keep their bytes), and every test that must
not write compares the hash of every file before and after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_release import pristine_site_packages

pytestmark = pytest.mark.release

VERSION = "0.5.23"
MIXTRAL = "sglang/srt/models/mixtral.py"
EXAONE = "sglang/srt/models/exaone4.py"
JOURNAL = ".patchkit/sglang/journal.json"


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def linked(source: Path, tmp_path: Path) -> Path:
    """A hard-linked copy of ``source`` (``cp -al``); a file a test edits must be replaced, not written in place."""
    site = tmp_path / "site-packages"
    subprocess.run(["cp", "-al", str(source), str(site)], check=True)
    return site


def replace_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a new inode (the prepared tree shares the old one)."""
    path.unlink()
    path.write_bytes(data)


def args(site: Path, *more: str) -> list[str]:
    return ["--target", "sglang", "--site-packages", str(site), *more]


@pytest.fixture(scope="module")
def unpatched(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("unpatched") / "site-packages"
    shutil.copytree(pristine_site_packages(VERSION), site)
    return site


@pytest.fixture(scope="module")
def patched(unpatched, tmp_path_factory) -> Path:
    from conftest import Cli

    site = tmp_path_factory.mktemp("patched") / "site-packages"
    shutil.copytree(unpatched, site)
    result = Cli()("apply", *args(site, "--arch", "MixtralForCausalLM", "--arch", "Exaone4ForCausalLM"))
    assert result.exit_code == 0, result.output
    return site


# -- status ------------------------------------------------------------------------------------------------------


def test_status_names_the_patched_classes_and_files(patched, tmp_path, cli):
    site = linked(patched, tmp_path)
    before = snapshot(site)
    code, report = cli.json("status", *args(site))
    assert code == 0 and report["command"] == "status" and report["target"] == "sglang"
    assert report["version"] == VERSION and report["unfinished"] is None and report["pending"] == []
    assert [(r["architecture"], r["file"], r["state"]) for r in report["classes"]] == [
        ("Exaone4ForCausalLM", EXAONE, "patched"),
        ("MixtralForCausalLM", MIXTRAL, "patched"),
    ]
    assert [(e["path"], e["state"], e["version"]) for e in report["entries"]] == [
        (EXAONE, "patched", VERSION),
        (MIXTRAL, "patched", VERSION),
    ]
    text = cli("status", *args(site))
    assert text.exit_code == 0 and "patched MixtralForCausalLM" in text.stdout and "0.5.23" in text.stdout
    assert snapshot(site) == before


def test_status_arch_shows_only_that_class(patched, tmp_path, cli):
    """``status --target sglang --arch X`` (issue 44): only X's class and the files holding its patch; an
    architecture the journal lacks is named as not patched; one SGLang does not register is a usage error."""
    site = linked(patched, tmp_path)
    before = snapshot(site)
    code, report = cli.json("status", *args(site, "--arch", "MixtralForCausalLM"))
    assert code == 0 and [(r["architecture"], r["file"]) for r in report["classes"]] == [
        ("MixtralForCausalLM", MIXTRAL)
    ]
    assert [e["path"] for e in report["entries"]] == [MIXTRAL] and report["not_patched"] == []
    code, report = cli.json("status", *args(site, "--arch", "LlamaForCausalLM", "--arch", "Exaone4ForCausalLM"))
    assert code == 0 and [r["architecture"] for r in report["classes"]] == ["Exaone4ForCausalLM"]
    assert report["not_patched"] == ["LlamaForCausalLM"] and [e["path"] for e in report["entries"]] == [EXAONE]
    assert "not patched: LlamaForCausalLM" in cli("status", *args(site, "--arch", "LlamaForCausalLM")).stdout
    bad = cli("status", *args(site, "--arch", "NopeForCausalLM"))
    assert bad.exit_code == 2 and "Traceback" not in bad.output and "NopeForCausalLM" in bad.stderr.splitlines()[0]
    assert snapshot(site) == before


def test_status_tells_edited_reinstalled_and_upgraded_files(patched, unpatched, tmp_path, cli):
    site = linked(patched, tmp_path)
    replace_bytes(site / MIXTRAL, (site / MIXTRAL).read_bytes() + b"# edited\n")
    replace_bytes(site / EXAONE, (unpatched / EXAONE).read_bytes())
    code, report = cli.json("status", *args(site))
    assert code == 0 and {e["path"]: e["state"] for e in report["entries"]} == {
        EXAONE: "reinstalled",
        MIXTRAL: "edited",
    }
    text = cli("status", *args(site)).stdout
    assert "edited: edited by hand since patchkit wrote it" in text
    # the journal names another release: the file the installer put there (RECORD's bytes) is an upgrade's
    journal = json.loads((site / JOURNAL).read_text())
    for entry in journal["entries"]:
        entry["version" if "version" in entry else "vllm_version"] = "0.5.22"
    replace_bytes(site / JOURNAL, json.dumps(journal).encode())
    code, report = cli.json("status", *args(site))
    assert {e["path"]: (e["state"], e["version"]) for e in report["entries"]} == {
        EXAONE: ("upgraded", "0.5.22"),
        MIXTRAL: ("edited", "0.5.22"),
    }


def test_status_names_an_unfinished_run(patched, tmp_path, cli):
    site = linked(patched, tmp_path)
    journal = json.loads((site / JOURNAL).read_text())
    mixtral = next(e for e in journal["entries"] if e["path"] == MIXTRAL)
    journal["pending"] = [
        {"path": MIXTRAL, "sha256_before": mixtral["sha256_before"], "sha256_after": mixtral["sha256_after"]}
    ]
    journal["pending_operation"] = "revert"
    replace_bytes(site / JOURNAL, json.dumps(journal).encode())
    code, report = cli.json("status", *args(site))
    assert code == 0 and report["pending"] == [MIXTRAL] and report["unfinished"]["operation"] == "revert"
    assert {e["path"]: e["state"] for e in report["entries"]}[MIXTRAL] == "interrupted"
    assert "unfinished run:" in cli("status", *args(site)).stdout


def test_status_without_a_journal_says_so(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    before = snapshot(site)
    code, report = cli.json("status", *args(site))
    assert code == 0 and report["classes"] == [] and report["entries"] == []
    assert "no patchkit changes in this SGLang" in cli("status", *args(site)).stdout
    assert snapshot(site) == before


def test_status_refuses_what_it_does_not_take(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    result = cli("status", *args(site, "--model", str(tmp_path)))
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "error: --target sglang: status does not take --model yet (issue 44)" and len(lines) == 2


# -- apply --dry-run ---------------------------------------------------------------------------------------------


def test_a_dry_run_shows_the_diff_and_writes_nothing(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    before = snapshot(site)
    wanted = ("--arch", "MixtralForCausalLM", "--arch", "Exaone4ForCausalLM", "--arch", "LlamaForCausalLM")
    code, plan = cli.json("apply", *args(site, *wanted, "--dry-run"))
    assert code == 0 and plan["dry_run"] is True and plan["written"] == []
    assert [(o["architecture"], o["status"]) for o in plan["outcomes"]] == [
        ("MixtralForCausalLM", "applied"),
        ("Exaone4ForCausalLM", "applied"),
        ("LlamaForCausalLM", "native"),
    ]
    assert plan["planned"] == [EXAONE, MIXTRAL]
    assert plan["diff"].startswith(f"--- a/{EXAONE}\n+++ b/{EXAONE}\n@@ ")
    assert f"--- a/{MIXTRAL}\n+++ b/{MIXTRAL}\n" in plan["diff"]
    assert "+    def set_eagle3_layers_to_capture(" in plan["diff"]
    text = cli("apply", *args(site, *wanted, "--dry-run"))
    assert text.exit_code == 0 and "would apply MixtralForCausalLM" in text.stdout
    assert text.stdout.rstrip().endswith(f"dry run: would write {EXAONE}, {MIXTRAL}; nothing was written")
    assert snapshot(site) == before
    # the diff is what the real run writes: applied to the files, it gives the bytes apply writes
    code, done = cli.json("apply", *args(site, *wanted))
    assert code == 0 and done["written"] == plan["planned"]
    assert _patched_by(plan["diff"], unpatched, tmp_path) == {p: (site / p).read_bytes() for p in plan["planned"]}


def _patched_by(diff: str, source: Path, tmp_path: Path) -> dict[str, bytes]:
    """The files ``diff`` names, from ``source``, with ``patch -p1`` applied (in a scratch folder)."""
    scratch = tmp_path / "scratch"
    paths = [line[len("+++ b/") :] for line in diff.splitlines() if line.startswith("+++ b/")]
    for p in paths:
        (scratch / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / p, scratch / p)
    subprocess.run(["patch", "-p1", "-s"], input=diff.encode(), cwd=scratch, check=True)
    return {p: (scratch / p).read_bytes() for p in paths}


def test_a_refused_dry_run_plans_nothing(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    before = snapshot(site)
    code, plan = cli.json(
        "apply", *args(site, "--arch", "MixtralForCausalLM", "--arch", "GraniteForCausalLM", "--dry-run")
    )
    assert code == 3 and plan["planned"] == [] and plan["diff"] == ""
    assert [o["status"] for o in plan["outcomes"]] == ["applied", "refused"]
    result = cli("apply", *args(site, "--arch", "NoSuchForCausalLM", "--dry-run"))
    assert result.exit_code == 2 and "Traceback" not in result.output and len(result.stderr.splitlines()) == 2
    assert snapshot(site) == before


# -- revert --arch -----------------------------------------------------------------------------------------------


def test_revert_arch_restores_only_that_class(patched, unpatched, tmp_path, cli):
    site = linked(patched, tmp_path)
    exaone = (site / EXAONE).read_bytes()
    code, report = cli.json("revert", *args(site, "--arch", "MixtralForCausalLM"))
    assert code == 0 and report["restored"] == [MIXTRAL] and report["rewritten"] == [] and report["changed"] == []
    assert (site / MIXTRAL).read_bytes() == (unpatched / MIXTRAL).read_bytes()
    assert (site / EXAONE).read_bytes() == exaone
    code, left = cli.json("status", *args(site))
    assert [(r["architecture"], r["state"]) for r in left["classes"]] == [("Exaone4ForCausalLM", "patched")]
    code, checked = cli.json("verify", *args(site))
    assert code == 0 and [v["architecture"] for v in checked["architectures"]] == ["Exaone4ForCausalLM"]
    code, report = cli.json("revert", *args(site, "--arch", "Exaone4ForCausalLM"))
    assert code == 0 and report["restored"] == [EXAONE]
    assert snapshot(site) == snapshot(unpatched)  # the journal's folder gone with its last entry


@pytest.mark.parametrize(
    "arch, first, hint",
    [
        (
            "MixtralForCausalLMM",
            "error: --arch 'MixtralForCausalLMM' is not in SGLang's registry",
            "hint: did you mean 'MixtralForCausalLM'?",
        ),
        (
            "LlamaForCausalLM",
            "error: --arch 'LlamaForCausalLM': patchkit patched no such class in this SGLang (its journal holds "
            "Exaone4ForCausalLM, MixtralForCausalLM)",
            "hint: run '",
        ),
    ],
)
def test_revert_arch_refuses_bad_input_and_changes_nothing(arch, first, hint, patched, tmp_path, cli):
    site = linked(patched, tmp_path)
    before = snapshot(site)
    result = cli("revert", *args(site, "--arch", arch))
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(first) and lines[1].startswith(hint), lines
    # the advised command names this SGLang, as the failing one did (it said a bare 'patchkit status/scan')
    assert f"--target sglang --site-packages {site}" in lines[1], lines
    assert snapshot(site) == before


def test_apply_advises_a_revert_of_this_sglang(unpatched, tmp_path, cli):
    """The revert apply advises runs on the SGLang apply wrote (it said 'patchkit revert --target sglang', which
    reverts the default interpreter's)."""
    site = linked(unpatched, tmp_path)
    result = cli("apply", *args(site, "--arch", "MixtralForCausalLM"))
    assert result.exit_code == 0, result.output
    assert f"revert --target sglang --site-packages {site} --arch MixtralForCausalLM'" in result.stdout


def test_revert_arch_without_a_journal_has_nothing_to_do(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    before = snapshot(site)
    code, report = cli.json("revert", *args(site, "--arch", "MixtralForCausalLM"))
    assert code == 0 and report["restored"] == [] and report["changed"] == []
    assert "nothing to revert" in cli("revert", *args(site, "--arch", "MixtralForCausalLM")).stdout
    assert snapshot(site) == before


def test_revert_arch_refuses_an_edited_file(patched, tmp_path, cli):
    site = linked(patched, tmp_path)
    replace_bytes(site / MIXTRAL, (site / MIXTRAL).read_bytes() + b"# edited\n")
    before = snapshot(site)
    code, report = cli.json("revert", *args(site, "--arch", "MixtralForCausalLM"))
    assert code == 3 and report["changed"] == [MIXTRAL] and report["restored"] == []
    assert snapshot(site) == before


def _two_classes_in_one_file(site: Path) -> None:
    """``mixtral.py`` with a second model written beside the first: Mixtral's classes copied under ``MixtralB*``
    names, both registered (``EntryClass = [MixtralForCausalLM, MixtralBForCausalLM]``): two patchable classes of
    one module, which the releases do not have."""
    import re

    text = (site / MIXTRAL).read_text()
    head, classes = (
        text[: text.index("class MixtralMoE(")],
        text[text.index("class MixtralMoE(") : text.index("EntryClass")],
    )
    names = re.findall(r"^class (\w+)\(", classes, flags=re.M)
    copy = re.sub(r"\b(" + "|".join(names) + r")\b", lambda m: "MixtralB" + m.group(1)[len("Mixtral") :], classes)
    replace_bytes(
        site / MIXTRAL, (head + classes + copy + "EntryClass = [MixtralForCausalLM, MixtralBForCausalLM]\n").encode()
    )


def test_revert_arch_rewrites_a_shared_file_to_what_applying_the_rest_gives(unpatched, tmp_path, cli):
    site = linked(unpatched, tmp_path)
    _two_classes_in_one_file(site)
    shared = (site / MIXTRAL).read_bytes()
    only_b = tmp_path / "only-b"
    subprocess.run(["cp", "-al", str(site), str(only_b)], check=True)
    code, report = cli.json("apply", *args(only_b, "--arch", "MixtralBForCausalLM"))
    assert code == 0 and report["written"] == [MIXTRAL]
    code, report = cli.json("apply", *args(site, "--arch", "MixtralForCausalLM", "--arch", "MixtralBForCausalLM"))
    assert code == 0 and report["written"] == [MIXTRAL]
    code, report = cli.json("revert", *args(site, "--arch", "MixtralForCausalLM"))
    assert code == 0 and report["restored"] == [] and report["rewritten"] == [MIXTRAL]
    assert (site / MIXTRAL).read_bytes() == (only_b / MIXTRAL).read_bytes()
    code, left = cli.json("status", *args(site))
    assert [(r["architecture"], r["state"]) for r in left["classes"]] == [("MixtralBForCausalLM", "patched")]
    code, report = cli.json("revert", *args(site, "--arch", "MixtralBForCausalLM"))
    assert code == 0 and report["restored"] == [MIXTRAL] and (site / MIXTRAL).read_bytes() == shared


# -- the journal's version field ---------------------------------------------------------------------------------


def test_the_sglang_journal_names_its_target_and_version(patched, cli):
    journal = json.loads((patched / JOURNAL).read_text())
    assert journal["target"] == "sglang"
    assert [(e["path"], e["version"]) for e in journal["entries"]] == [(EXAONE, VERSION), (MIXTRAL, VERSION)]
    assert not any("vllm_version" in e for e in journal["entries"])


def test_a_journal_of_the_previous_release_still_reverts(patched, unpatched, tmp_path, cli):
    """The journal as the previous patchkit wrote it (``vllm_version``, no ``target``) reads, and reverts
    byte-exact."""
    site = linked(patched, tmp_path)
    journal = json.loads((site / JOURNAL).read_text())
    del journal["target"]
    for entry in journal["entries"]:
        entry["vllm_version"] = entry.pop("version")
    replace_bytes(site / JOURNAL, json.dumps(journal, indent=2).encode())
    code, report = cli.json("status", *args(site))
    assert code == 0 and [(e["state"], e["version"]) for e in report["entries"]] == [("patched", VERSION)] * 2
    code, report = cli.json("revert", *args(site, "--arch", "Exaone4ForCausalLM"))
    assert code == 0 and report["restored"] == [EXAONE]
    rewritten = json.loads((site / JOURNAL).read_text())  # what stays is written in the new form
    assert [(e["path"], e["version"]) for e in rewritten["entries"]] == [(MIXTRAL, VERSION)]
    code, report = cli.json("revert", *args(site))
    assert code == 0 and report["restored"] == [MIXTRAL]
    assert snapshot(site) == snapshot(unpatched)


def test_the_vllm_journal_keeps_vllm_version(tmp_path):
    """vLLM's journal is written as before (``vllm_version``), so a patchkit of the previous release reads it."""
    from patchkit.store.journal import Journal
    from patchkit.store.records import PlannedWrite

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "a.py").write_bytes(b"x = 1\n")
    journal = Journal(tmp_path, "vllm")
    journal.commit([PlannedWrite("vllm/a.py", b"x = 1\n", b"x = 2\n", ["p"])], "0.17.1")
    raw = json.loads((tmp_path / ".patchkit" / "vllm" / "journal.json").read_text())
    assert raw["target"] == "vllm" and [e["vllm_version"] for e in raw["entries"]] == ["0.17.1"]
    assert "version" not in raw["entries"][0] and Journal(tmp_path, "vllm").entries["vllm/a.py"].version == "0.17.1"


# -- resolve -----------------------------------------------------------------------------------------------------


def test_resolve_names_the_class_its_file_and_its_chain(unpatched, cli):
    code, report = cli.json("resolve", "MixtralForCausalLM", *args(unpatched))
    assert code == 0 and report["registered"] and report["module"] == "sglang.srt.models.mixtral"
    assert report["state"] == "missing"
    assert [(k["role"], k["class"].rsplit(".", 1)[1], k["file"], k["line"]) for k in report["chain"]] == [
        ("wrapper", "MixtralForCausalLM", MIXTRAL, 341),
        ("model", "MixtralModel", MIXTRAL, 277),
        ("layers", "MixtralDecoderLayer", MIXTRAL, 205),
    ]
    code, report = cli.json("resolve", "DeepseekV3ForCausalLM", *args(unpatched))
    assert code == 0 and report["state"] == "native"
    assert report["bases"][0] == "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM"
    assert [k["class"].rsplit(".", 1)[1] for k in report["chain"]] == [
        "DeepseekV3ForCausalLM",
        "DeepseekV2Model",
        "DeepseekV2DecoderLayer",
    ]
    text = cli("resolve", "MixtralForCausalLM", *args(unpatched)).stdout
    assert "\nlayers: sglang.srt.models.mixtral.MixtralDecoderLayer (sglang/srt/models/mixtral.py:205)\n" in text


def test_resolve_an_unknown_name_suggests_the_closest(unpatched, cli):
    code, report = cli.json("resolve", "MixtralForCausalLMM", *args(unpatched))
    assert code == 1 and not report["registered"] and report["suggestions"][0] == "MixtralForCausalLM"
    result = cli("resolve", "Mixtral ForCausalLM", *args(unpatched))
    assert result.exit_code == 2 and "Traceback" not in result.output and len(result.stderr.splitlines()) == 2


def test_each_command_says_in_its_help_whether_it_takes_sglang():
    """``--help`` of every command with ``--target`` names 'sglang' exactly where the command takes it
    (``options.SGLANG_COMMANDS``): apply, verify, revert, status and resolve said "(only 'vllm')" while they
    took ``--target sglang`` (issue 44)."""
    import re

    from typer.testing import CliRunner

    from patchkit.ui.cli import app
    from patchkit.ui.options import SGLANG_COMMANDS

    runner = CliRunner()
    said = {}
    for command in ("scan", "doctor", "apply", "verify", "revert", "status", "resolve", "list", "explain", "rehearse"):
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).output
        text = re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", out))
        assert "--target" in text, (command, out[-500:])
        said[command] = "'sglang'" in text and "only 'vllm'" not in text
    assert {c for c, takes in said.items() if takes} == set(SGLANG_COMMANDS), said


# -- explain -----------------------------------------------------------------------------------------------------


def test_explain_a_class_says_what_apply_would_do_and_writes_nothing(unpatched, patched, tmp_path, cli):
    """``explain --target sglang eagle3-sglang-capture:<Arch>`` (issue 44): the class's chain, what a dry-run apply
    says for it with the lines it adds (the dry run's own diff, counted), and whether the journal holds it; the
    shipped id alone needs no install; an unknown id or architecture is a usage error (exit 2)."""
    (tmp_path / "u").mkdir()
    (tmp_path / "p").mkdir()
    site = linked(unpatched, tmp_path / "u")
    before = snapshot(site)
    code, report = cli.json("explain", "eagle3-sglang-capture:MixtralForCausalLM", *args(site))
    assert code == 0 and report["target"] == "sglang" and report["version"] == VERSION
    k = report["class"]
    assert k["outcome"] == "applied" and k["module"].endswith("mixtral") and not k["journaled"]
    _, plan = cli.json("apply", *args(site, "--arch", "MixtralForCausalLM", "--dry-run"))
    added = sum(1 for line in plan["diff"].splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert k["lines_added"] == added > 0
    assert k["chain"][0].startswith(f"wrapper sglang.srt.models.mixtral.MixtralForCausalLM {MIXTRAL}:"), k["chain"]
    _, native = cli.json("explain", "eagle3-sglang-capture:LlamaForCausalLM", *args(site))
    assert native["class"]["outcome"] == "native" and native["class"]["lines_added"] == 0
    assert snapshot(site) == before
    done = linked(patched, tmp_path / "p")
    _, held = cli.json("explain", "eagle3-sglang-capture:MixtralForCausalLM", *args(done))
    assert held["class"]["journaled"] and held["class"]["outcome"] == "already applied"
    code, shipped = cli.json("explain", "eagle3-sglang-capture", "--target", "sglang")
    assert code == 0 and shipped["class"] is None and shipped["qualified"] == ["0.5.14", "0.5.16", "0.5.23"]
    text = cli("explain", "eagle3-sglang-capture:MixtralForCausalLM", *args(site)).stdout
    assert "applied" in text and "chain" in text
    for bad in ("eagle3-sglang-captur", "eagle3-sglang-capture:NopeForCausalLM"):
        result = cli("explain", bad, *args(site))
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert len(result.stderr.splitlines()) == 2, result.stderr


# -- behaviour, not names: the id convention the patch copies ----------------------------------------------------


def test_a_release_whose_llama_maps_ids_otherwise_fails_closed(patched, unpatched, tmp_path, cli):
    """Issue 44 (and the brief's "behaviour, not names"): the patch copies the release's Llama setter. With its
    ``val + 1`` made ``val + 2`` in a copy of 0.5.23 (every name kept), apply copied the new offset into Mixtral
    and verify passed the patched classes (their setters equal Llama's). Now apply refuses (exit 3, nothing
    written) and verify fails the patched ones with "not checked", naming the line."""

    def shifted(site: Path) -> Path:
        llama = site / "sglang/srt/models/llama.py"
        text = llama.read_text()
        assert "[val + 1 for val in layer_ids]" in text
        replace_bytes(llama, text.replace("[val + 1 for val in layer_ids]", "[val + 2 for val in layer_ids]").encode())
        return site

    (tmp_path / "p").mkdir()
    (tmp_path / "u").mkdir()
    done, fresh = shifted(linked(patched, tmp_path / "p")), shifted(linked(unpatched, tmp_path / "u"))
    before = snapshot(done), snapshot(fresh)
    code, report = cli.json("verify", *args(done))
    assert code == 1, report
    result = cli("verify", *args(done, "--arch", "MixtralForCausalLM"))
    assert result.exit_code == 1
    assert "not checked: LlamaForCausalLM.set_eagle3_layers_to_capture maps ids" in result.stdout
    code, plan = cli.json("apply", *args(fresh, "--arch", "MixtralForCausalLM"))
    assert code == 3 and plan["written"] == [], plan
    assert plan["outcomes"][0]["reason"].startswith("not checked:") and "llama.py:" in plan["outcomes"][0]["reason"]
    assert (snapshot(done), snapshot(fresh)) == before
