"""The documentation stands alone: every relative link in README.md and docs/ resolves inside the
repository (anchors included), every repository path it names exists, and no page points
outside the repository or reads like a lab notebook (session or issue numbers). The benchmark
notes (bench/README.md) are held to the same, and the no-pointer rule covers the generated
benchmark report, the code's docstrings and comments (gateway/, bench/, tests/, fuzz/) and the
CI scripts."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import REPO_ROOT

NOT_IN_REPO = {".git", ".venv", ".test-venvs", "data", ".pytest_cache", "__pycache__"}
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FORBIDDEN = re.compile(
    r"\.\./shared|shared/protocols|shared/DESIGN|\b[Ss]ession \d|\b[Ii]ssue \d|/work/shared"
    # the outside protocol reference's files and numbered sections ("tank.md section 7", "7.6")
    r"|\bclients\.md|\bDESIGN\.md|\.md section \d|\.md \d+\.\d"
)


def pages() -> list[Path]:
    return [
        REPO_ROOT / "README.md",
        *sorted((REPO_ROOT / "docs").rglob("*.md")),
        REPO_ROOT / "bench" / "README.md",
    ]


def checked_for_lab_notes() -> list[Path]:
    """Every page, the generated benchmark report, the Python sources of the package, the
    benchmarks, the tests and the fuzzers, and the CI scripts; not this file, which spells the
    patterns out."""
    code = [
        p for top in ("gateway", "bench", "tests", "fuzz") for p in (REPO_ROOT / top).rglob("*.py")
    ]
    ci = [p for p in (REPO_ROOT / ".ci").rglob("*") if p.is_file()]
    files = [*pages(), REPO_ROOT / "bench" / "results" / "REPORT.md", *code, *ci]
    return sorted(set(files) - {Path(__file__).resolve()})


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (their lines blanked, so line numbers hold)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"^#{1,6} (.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def top_level() -> set[str]:
    return {p.name for p in REPO_ROOT.iterdir()} - NOT_IN_REPO


def link_problems(page: Path, root: Path = REPO_ROOT) -> list[str]:
    problems = []
    root = root.resolve()
    rel = page.relative_to(root)
    for lineno, line in enumerate(prose(page.read_text()).splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{rel}:{lineno}: link {target!r}"
            if not dest.is_relative_to(root):
                problems.append(f"{where} points outside the repository")
            elif not dest.exists():
                problems.append(f"{where}: {dest.relative_to(root)} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


def named_paths(text: str) -> set[str]:
    """Code spans that name a repository path: the first segment is a top-level entry of the
    repository (``gateway/...``, ``docs/...``, ``Dockerfile``); ``<placeholder>`` and ``*``
    parts are globs."""
    tops = top_level()
    out = set()
    for span in CODE_SPAN.findall(text):
        span = span.strip().rstrip(".,:;")
        if " " in span or "://" in span or "=" in span or span.startswith(("/", "-")):
            continue
        if span.split("/", 1)[0] in tops:
            out.add(span)
    return out


def path_exists(name: str) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", name)
    if "*" in pattern:
        return any(REPO_ROOT.glob(pattern.rstrip("/")))
    return (REPO_ROOT / pattern).exists()


def test_every_relative_link_resolves_inside_the_repository() -> None:
    problems = [p for page in pages() for p in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_every_path_the_docs_name_exists() -> None:
    problems = [
        f"{page.relative_to(REPO_ROOT)}: `{name}` does not exist in the repository"
        for page in pages()
        for name in sorted(named_paths(page.read_text()))
        if not path_exists(name)
    ]
    assert not problems, "\n".join(problems)


def test_no_pointer_outside_the_repository_and_no_lab_notes() -> None:
    files = checked_for_lab_notes()
    problems = [
        f"{path.relative_to(REPO_ROOT)}:{lineno}: {line.strip()}"
        for path in files
        for lineno, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    # a broken link, a missing anchor and a link out of the repository are each reported
    page = REPO_ROOT / "docs" / "configuration.md"
    assert "listenerskafka08" in anchors(page)
    assert slug('Upstream: a server (`type = "upstream"`)') == "upstream-a-server-type--upstream"
    assert named_paths("see `gateway/cli.py`, `/healthz`, `a b/c`, `nats://x/y`") == {
        "gateway/cli.py"
    }
    assert path_exists("gateway/protocols/<name>/codec.py")
    assert not path_exists("gateway/no_such_module.py")
    assert FORBIDDEN.search("as session 9 showed") and FORBIDDEN.search("see ../shared/x.md")
    assert FORBIDDEN.search("the captures of tank.md section 7") and FORBIDDEN.search(
        "cursus.md 9.6"
    )
    assert not FORBIDDEN.search("docs/decisions.md 2026-11-25, a Spark session of local[2]")
    covered = {p.relative_to(REPO_ROOT).as_posix() for p in checked_for_lab_notes()}
    assert {"bench/README.md", "bench/results/REPORT.md", "bench/targets.py"} <= covered
    assert {"tests/support.py", ".ci/deps/pipeline.sh", "gateway/cli.py"} <= covered
    assert "tests/docs/test_links.py" not in covered
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "limits.md").write_text("# Limits\n")
    probe = tmp_path / "docs" / "probe.md"
    probe.write_text(
        "[a](missing.md) [b](limits.md#no-such) [c](../../outside.md) [d](limits.md#limits)\n"
        "```\n[e](in-a-code-block.md)\n```\n"
    )
    found = link_problems(probe, tmp_path.resolve())
    assert [f.split(": ", 1)[0] for f in found] == ["docs/probe.md:1"] * 3, found
