"""The README and docs/ hold together: every relative link resolves, and the README stays short and narrow.

Offline (reads only this repository's Markdown files). Also a script: ``python tests/test_docs_links.py``
prints each broken link as ``file:line: target (why)`` and exits 1 when there is one.

A link is ``[text](target)`` outside fenced code blocks and inline code; ``http(s):``/``mailto:``
targets are not checked. ``path#anchor`` must name an existing file (relative to the linking
file), and the anchor a heading of it, slugged as GitHub does (lower case; characters other than
letters, digits, spaces, ``-`` and ``_`` dropped; spaces to ``-``; a repeated slug gets ``-1``, ``-2``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 120
"""Issue 42 (issue 19 set 200): the README is at most 120 lines; the rest lives in docs/."""
README_MAX_WIDTH = 120
"""Issue 42: no README line is over 120 characters (a table row ran past 500)."""

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`[^`]*`")


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every ``docs/*.md`` under ``root``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _prose(text: str):
    """``(line number, line)`` of the lines outside fenced code blocks, inline code blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("    "):
            yield number, _INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (``Every node of a Ray cluster (`--ray`)`` ->
    ``every-node-of-a-ray-cluster---ray``)."""
    text = heading.strip().lower().replace("`", "")
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates numbered as GitHub numbers them)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(paths: list[Path]) -> list[str]:
    """``file:line: target (why)`` for each relative link in ``paths`` that does not resolve."""
    problems = []
    for path in paths:
        for number, line in _prose(path.read_text(encoding="utf-8")):
            for target in _LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(path.parent.parent) if path.parent.name == 'docs' else path.name}:{number}"
                if not dest.is_file():
                    problems.append(f"{where}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: {target} (no heading #{anchor} in {dest.name})")
    return problems


def test_every_relative_link_resolves():
    problems = broken_links(documents())
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_is_at_most_120_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move sections into docs/ (at most {README_MAX_LINES})"
    )


def test_no_readme_line_is_over_120_characters():
    """Characters, not bytes (``≤``, ``–`` and ``→`` are one each), code blocks and tables included."""
    long = [
        f"README.md:{number}: {len(line)} characters"
        for number, line in enumerate((ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > README_MAX_WIDTH
    ]
    assert not long, f"over {README_MAX_WIDTH} characters; wrap, or move the detail into docs/:\n" + "\n".join(long)


def test_every_docs_page_is_reachable_from_the_readme():
    """A page nobody links to is lost: each docs/*.md is linked from the README or from a page it links."""
    reached, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for _, line in _prose(page.read_text(encoding="utf-8")):
            for target in _LINK.findall(line):
                dest = (page.parent / target.partition("#")[0]).resolve()
                if dest.suffix == ".md" and dest.is_file() and dest.parent in (ROOT, ROOT / "docs"):
                    todo.append(dest)
    missing = [p.name for p in documents()[1:] if p.resolve() not in reached]
    assert not missing, f"docs pages no link reaches from README.md: {missing}"


def test_the_checker_finds_broken_links(tmp_path):
    """The checker itself: a missing file, a missing heading and a link in code (ignored)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## The `--ray` part\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# R\n\n[ok](docs/a.md#the---ray-part) [gone](docs/b.md) [bad anchor](docs/a.md#nowhere)\n"
        "[self](#r) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n[web](https://example.com/x.md)\n",
        encoding="utf-8",
    )
    problems = broken_links(documents(tmp_path))
    assert problems == [
        "README.md:3: docs/b.md (no such file)",
        "README.md:3: docs/a.md#nowhere (no heading #nowhere in a.md)",
    ]


if __name__ == "__main__":
    found = broken_links(documents())
    print("\n".join(found) or f"{len(documents())} files: every relative link resolves")
    sys.exit(1 if found else 0)
