"""patchkit.ui.render on its own: breaks only at spaces, the same layout with and without colour."""

from __future__ import annotations

import io
import re

import pytest

from patchkit.ui.render import Node, Writer

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROWS = [
    [
        "eagle3-deepseek-backbone",
        ("applied", "green"),
        "vllm/model_executor/models/deepseek_v2.py:1034 DeepseekV2Model",
    ],
    [
        "eagle3-allowlist",
        ("not applicable", "yellow"),
        "needs a release with the SupportsEagle3 Protocol, which this one lacks",
    ],
]


def render(width: int | None, color: bool, draw) -> list[str]:
    buf = io.StringIO()
    draw(Writer(buf, width, color))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [50, 60, 80, 100, 140])
def test_table_layout_is_the_same_in_colour(width):
    plain = render(width, False, lambda w: w.table(["patch", "outcome", "where / why"], ROWS))
    colour = render(width, True, lambda w: w.table(["patch", "outcome", "where / why"], ROWS))
    assert [ANSI.sub("", line) for line in colour] == plain
    assert any("\x1b[" in line for line in colour)
    for line in plain:
        assert line == line.rstrip()
        assert len(line) <= width or " " not in line.strip()


def test_words_are_never_split_and_pipes_are_not_wrapped():
    text = "a " * 10 + "vllm/model_executor/models/deepseek_v2.py:1034 " + "b " * 10
    lines = render(30, False, lambda w: w.line(text.strip(), indent="  "))
    assert "    vllm/model_executor/models/deepseek_v2.py:1034" in lines  # alone, whole, over 30
    assert all(len(line) <= 30 for line in lines if "deepseek" not in line)
    assert render(None, False, lambda w: w.line(text.strip())) == [text.strip()]


def test_tree_continuation_lines_keep_the_guides():
    leaf = Node(
        (
            "✓ captures the residual stream entering each layer  ",
            ("vllm/model_executor/models/deepseek_v2.py:1213", "blue"),
        )
    )
    lines = render(60, False, lambda w: w.tree(("✓ DeepseekV2Model",), (leaf, leaf)))
    assert lines[0] == "✓ DeepseekV2Model"
    assert lines[1].startswith("├── ✓ captures")
    assert lines[2] == "│       vllm/model_executor/models/deepseek_v2.py:1213"
    assert lines[3].startswith("└── ✓ captures")
    assert lines[4] == "        vllm/model_executor/models/deepseek_v2.py:1213"
