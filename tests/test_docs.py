"""The docs hold together: docs/settings.md is what the Settings fields make of it, the client
docs/websocket.md lists is the example file the tests run, and every relative link in the
READMEs and docs/ reaches a file (and a heading, for a ``#anchor``).

External links (http, https, mailto) are not fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.settings import reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def documents() -> list[Path]:
    """The Markdown files whose links are checked."""
    found = [ROOT / "README.md", ROOT / "pipeline/README.md", ROOT / "server/README.md"]
    found.append(ROOT / "bench/README.md")
    found += sorted(DOCS.rglob("*.md"))
    found += sorted((ROOT / "examples").rglob("*.md"))
    return [path for path in found if path.is_file()]


FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})(.*)$")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (inside ones become empty)."""
    lines: list[str] = []
    fence = ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = "" if not match.group(2).strip() else fence
            lines.append("")
        elif match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            fence = match.group(1)
            lines.append("")
        else:
            lines.append(line)
    return lines


def links(path: Path) -> list[tuple[int, str]]:
    """``(line number, target)`` of every link in a Markdown file, code left out."""
    found = []
    for number, line in enumerate(prose(path.read_text()), 1):
        reference_link = REFERENCE_LINK.match(line)
        if reference_link:
            found.append((number, reference_link.group(1)))
            continue
        line = INLINE_CODE.sub("", line)
        found += [(number, match.group(1)) for match in INLINE_LINK.finditer(line)]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown file has: its headings' slugs (repeats numbered) and HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(path.read_text()):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """What is wrong with the relative links of one file, one line per broken link."""
    problems = []
    for number, target in links(path):
        if SCHEME.match(target):
            continue  # http(s), mailto: not fetched
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not destination.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{where} (no heading #{anchor} in {destination.name})")
    return problems


def test_settings_reference_is_generated_from_the_settings() -> None:
    page = DOCS / "settings.md"
    expected = reference.render()
    assert page.is_file(), f"docs/settings.md is missing; make it with: {reference.COMMAND}"
    assert page.read_text() == expected, (
        "docs/settings.md differs from the Settings fields (server/settings/); "
        f"regenerate it with: {reference.COMMAND}"
    )


def test_settings_reference_lists_every_setting_once() -> None:
    page = reference.render()
    for name in reference.Settings.model_fields:
        assert page.count(f"`PARLEY_{name.upper()}`") == 1, name


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_the_readme_settings_table_has_the_real_defaults() -> None:
    fields = {
        env: field
        for _, _, group in reference.groups()
        for name, field in group
        for env in reference.env_names(name, field)
    }
    rows = 0
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        variable = cells[0].strip("`")
        if len(cells) < 3 or variable not in fields:
            continue
        rows += 1
        assert cells[1] == reference.default_text(fields[variable]), (
            f"README.md: {variable}'s default"
        )
    assert rows >= 10


def test_the_docs_index_and_the_readme_reach_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    pages = sorted(page.name for page in DOCS.glob("*.md") if page.name != "README.md")
    assert [page for page in pages if f"]({page}" not in index] == []
    assert "](docs/README.md)" in readme or "](docs/)" in readme


def test_the_websocket_page_lists_the_example_client_as_it_is() -> None:
    """docs/websocket.md shows examples/websocket_client/client.py whole, and that file is
    what tests/test_example_websocket_client.py runs: the listing is tested code."""
    client = (ROOT / "examples/websocket_client/client.py").read_text()
    page = (DOCS / "websocket.md").read_text()
    assert f"```python\n{client}```\n" in page, (
        "docs/websocket.md's listing differs from examples/websocket_client/client.py"
    )


def test_the_link_checker_finds_what_is_broken(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "target.md").write_text(
        "# A `code` heading: with punctuation!\n\n## Twice\n## Twice\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](target.md#a-code-heading-with-punctuation) [ok](target.md#twice-1) [ok](#local)\n"
        "[gone](missing.md) [bad anchor](target.md#nowhere) [web](https://example.com/x)\n"
        "`[in code](missing-too.md)`\n```\n[fenced](missing-three.md)\n```\n## Local\n"
    )
    assert broken_links(page) == [
        "page.md:2: missing.md (no such file)",
        "page.md:2: target.md#nowhere (no heading #nowhere in target.md)",
    ]
