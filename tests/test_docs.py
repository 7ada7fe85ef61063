"""README.md and docs/*.md: every relative link resolves, and the quoted CLI usage is argparse's."""
import pathlib
import re

import pytest

from experiments import entry

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
USAGE = re.compile(r"<!-- usage: hcjax(?P<args>[^>]*?) -->\n```text\n(?P<text>.*?)```", flags=re.DOTALL)


def prose(path: pathlib.Path) -> str:
    """The document without its fenced code blocks."""
    return FENCE.sub("", path.read_text())


def anchors(path: pathlib.Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces
    to hyphens, and -1, -2, ... after repeats."""
    seen, result = {}, set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#* *$", prose(path), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def broken_links(path: pathlib.Path) -> list[str]:
    """The relative links of one document whose file, folder or heading does not exist."""
    broken = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no heading #{anchor})")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_anchors_follow_github():
    assert "tuning-time-figure-1s-x-axis" in anchors(ROOT / "docs" / "studies.md")
    assert "the-cpu_learn-study-run-on-this-2-core-cpu" in anchors(ROOT / "docs" / "results.md")


def argparse_help(args: str, monkeypatch, capsys) -> str:
    """What `hcjax ARGS` prints in a 100-column terminal: the command's entry point (what
    `hcjax` and `python -m experiments` call) in this process, no interpreter to start."""
    for name, value in {"COLUMNS": "100", "NO_COLOR": "1", "PYTHON_COLORS": "0"}.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:  # argparse's --help exits
        entry.main(args.split())
    printed = capsys.readouterr()
    assert done.value.code == 0, printed.err
    return printed.out


def test_quoted_usage_is_what_argparse_prints(monkeypatch, capsys):
    quoted = [(m["args"].strip(), m["text"]) for path in DOCUMENTS for m in USAGE.finditer(path.read_text())]
    assert [args for args, _ in quoted] == ["--help", "run --help"]
    for args, text in quoted:
        printed = argparse_help(args, monkeypatch, capsys)
        assert text.split() == printed.split(), f"hcjax {args} now prints:\n{printed}"


def test_usage_is_quoted_once():
    # argparse's help is the one usage text: no document writes its own "usage: hcjax" elsewhere
    copies = sum(len(re.findall(r"^usage: hcjax", path.read_text(), flags=re.MULTILINE)) for path in DOCUMENTS)
    assert copies == 2
