"""The runners' aux-id sources are read from the functions that call the setter, not from a parse of
the whole 0.28 MB runner (apply checks the planned result with them; issue 11's apply ratio).

Whatever the text looks like, the result is the one a parse of the whole file gives: on every
cached release's runner files, and on small hand-written sources built to fool the text reading.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
from releases import Sweep, sweep
from vllm_release import pristine_site_packages

from patchkit.vllm.runner import aux_reads, draft_reads
from patchkit.vllm.release.source import SourceTree

RELEASES = sweep(Sweep.DERIVE)
SETTER = aux_reads.SETTER


def whole(source: bytes) -> tuple[aux_reads.AuxSource, ...]:
    """What the reading gives from a parse of the whole file (the reference)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    return aux_reads._aux_in_trees([tree], "f.py")


@pytest.mark.release
@pytest.mark.parametrize("version", RELEASES)
def test_runner_files_give_what_a_whole_parse_gives(version):
    site = pristine_site_packages(version)
    files = [p for p in sorted((site / aux_reads.WORKER_PACKAGE).rglob("*.py")) if SETTER.encode() in p.read_bytes()]
    assert files
    for path in files:
        source = path.read_bytes()
        found = aux_reads._aux_in_file(source, "f.py")
        assert found == whole(source), path
        assert found, path  # every release's runners take the ids from somewhere
    for path in files:  # the runner's setter method, and (0.17.1 on) eagle3_utils.py's function
        assert aux_reads._setter_functions(path.read_bytes()), path


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])
def test_derive_does_not_parse_the_whole_runner(version, monkeypatch):
    site = pristine_site_packages(version)
    runner = (site / aux_reads.WORKER_PACKAGE / "gpu_model_runner.py").read_bytes()
    parsed: list[bytes] = []
    real = ast.parse

    def spy(source, *args, **kwargs):
        parsed.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", spy)
    aux_reads._AUX_BY_FILE.clear()
    d = draft_reads.derive(SourceTree(site))
    assert {a.kind for a in d.aux} >= {"target"}
    assert runner not in parsed
    cut = [s for s in parsed if SETTER.encode() in s and b"class GPUModelRunner" not in s]
    assert cut and len(cut[0].strip()) < len(runner) // 10  # the method alone, not the 0.28 MB file


CASES = {
    "method": """
        class Runner:
            def load(self):
                ids = self.model.get_ids()
                self.model.set_aux_hidden_state_layers(ids)
    """,
    "nested def": """
        class Runner:
            def load(self):
                def inner(m):
                    ids = m.get_ids()
                    m.set_aux_hidden_state_layers(ids)
                inner(self.model)
    """,
    "continuation at column 0": """
        class Runner:
            def load(self):
                x = (self.model.
        set_aux_hidden_state_layers(self.model.get_ids()))
    """,
    "string at column 0 in the method": """
        class Runner:
            def load(self):
                doc = '''
        not code
        '''
                self.model.set_aux_hidden_state_layers(self.model.get_ids())
    """,
    "def in a docstring": """
        class Runner:
            '''
            def load(self):
            '''
            x = 1
        def load(model):
            model.set_aux_hidden_state_layers(model.get_ids())
    """,
    "decorator": """
        class Runner:
            @wrap(lambda m: m.set_aux_hidden_state_layers(m.get_ids()))
            def load(self):
                pass
    """,
    "module level": """
        model.set_aux_hidden_state_layers(model.get_ids())
    """,
    "class body": """
        class Runner:
            model.set_aux_hidden_state_layers(model.get_ids())
    """,
    "comment and string only": """
        # model.set_aux_hidden_state_layers(ids)
        def load(model):
            return "set_aux_hidden_state_layers"
    """,
    "trailing comment": """
        def load(model):
            ids = model.get_ids()  # then set_aux_hidden_state_layers
            model.set_aux_hidden_state_layers(ids)
    """,
    "two methods": """
        class Runner:
            def a(self):
                self.model.set_aux_hidden_state_layers(self.model.get_ids())

            def b(self):
                ids = read_config()
                self.model.set_aux_hidden_state_layers(ids)
    """,
    "signature over several lines": """
        def load(
            model,
        ) -> None:
            ids = model.get_ids()
            model.set_aux_hidden_state_layers(
                ids,
            )
    """,
    "tabs": "class Runner:\n\tdef load(self):\n\t\tself.m.set_aux_hidden_state_layers(self.m.get_ids())\n",
    "broken elsewhere": """
        def load(model):
            model.set_aux_hidden_state_layers(model.get_ids())
        def broken(:
    """,
}


@pytest.mark.parametrize("case", sorted(set(CASES) - {"broken elsewhere"}))
def test_hand_written_sources_give_what_a_whole_parse_gives(case):
    source = textwrap.dedent(CASES[case]).encode()
    assert aux_reads._aux_in_file(source, "f.py") == whole(source)


def test_a_file_that_does_not_parse_elsewhere_still_gives_its_setter_method():
    """The one difference from a whole parse, by design: a syntax error outside the setter's
    function no longer hides that function's reading (the whole parse gave nothing)."""
    source = textwrap.dedent(CASES["broken elsewhere"]).encode()
    assert whole(source) == ()
    assert [a.name for a in aux_reads._aux_in_file(source, "f.py")] == ["get_ids"]


@pytest.mark.parametrize(
    "case,cut",
    [
        ("method", True),
        ("nested def", True),
        ("two methods", True),
        ("signature over several lines", True),
        ("continuation at column 0", False),
        ("string at column 0 in the method", False),
        ("decorator", False),
        ("module level", False),
        ("class body", False),
        ("tabs", False),
    ],
)
def test_what_is_cut_out_and_what_is_parsed_whole(case, cut):
    source = textwrap.dedent(CASES[case]).encode()
    assert (aux_reads._setter_functions(source) is not None) is cut
