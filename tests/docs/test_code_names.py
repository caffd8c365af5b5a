"""The code the documentation names exists: every ``gateway/...`` path in README.md, docs/ and
bench/README.md (in prose as well as in code spans; ``test_links`` checks the code spans of every
top-level folder) and every dotted name ``gateway.x.y`` (a module, or a name a module defines).
A module that moves or is split leaves no page pointing at where it was."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.docs.test_links import pages, path_exists, prose
from tests.support import REPO_ROOT

# a path inside the package; not one under another root (``/etc/gateway/x.pem``)
PATH = re.compile(r"(?<![\w/.-])gateway/[\w./<>*-]*[\w>*/]")
# gateway.a.b..., with ``<placeholder>`` parts; not a file name such as ``gateway.toml``
DOTTED = re.compile(r"(?<![\w./-])gateway(?:\.(?:[A-Za-z_]\w*|<\w+>))+")
NOT_MODULES = {"toml", "json", "creds", "pem", "yaml", "yml", "md", "log"}


def named(text: str, pattern: re.Pattern[str]) -> set[str]:
    return {m.group(0).rstrip(".") for m in pattern.finditer(prose(text))}


@cache
def defined_names(module: Path) -> frozenset[str]:
    """The top-level names a module defines (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def module_file(parts: list[str], root: Path) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_exists(name: str, root: Path = REPO_ROOT) -> bool:
    """``gateway.a.b`` is a module or package, or ``gateway.a`` is one that defines ``b`` (and
    ``b.c`` an attribute of it, not checked further); a ``<placeholder>`` part matches any
    module or package there."""
    parts = name.split(".")
    if parts[-1] in NOT_MODULES:
        return True  # a file name (``gateway.toml``), not a module
    if any(p.startswith("<") for p in parts):
        at = next(i for i, p in enumerate(parts) if p.startswith("<"))
        parent = root.joinpath(*parts[:at])
        subs = [p.name for p in parent.iterdir() if (p / "__init__.py").is_file()]
        subs += [p.stem for p in parent.glob("*.py") if p.stem != "__init__"]
        return any(
            dotted_exists(".".join([*parts[:at], sub, *parts[at + 1 :]]), root)
            for sub in sorted(subs)
        )
    for cut in range(len(parts), 0, -1):
        module = module_file(parts[:cut], root)
        if module is not None:
            return cut == len(parts) or parts[cut] in defined_names(module)
    return False


def test_every_gateway_path_in_the_docs_exists() -> None:
    problems = [
        f"{page.relative_to(REPO_ROOT)}: {name} does not exist"
        for page in pages()
        for name in sorted(named(page.read_text(), PATH))
        if not path_exists(name)
    ]
    assert not problems, "\n".join(problems)


def test_every_dotted_gateway_name_in_the_docs_exists() -> None:
    problems = [
        f"{page.relative_to(REPO_ROOT)}: {name} is neither a module nor a name one defines"
        for page in pages()
        for name in sorted(named(page.read_text(), DOTTED))
        if not dotted_exists(name)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_moved_module(tmp_path: Path) -> None:
    text = (
        "See gateway/server.py and `gateway/old/gone.py`, not /etc/gateway/ca.pem.\n"
        "```\ngateway/in/a/code/block.py\n```\n"
        "`gateway.protocols.driver.drive`, gateway.core.engine.Core.execute, `gateway.toml`.\n"
    )
    assert named(text, PATH) == {"gateway/server.py", "gateway/old/gone.py"}
    assert named(text, DOTTED) == {
        "gateway.protocols.driver.drive",
        "gateway.core.engine.Core.execute",
        "gateway.toml",
    }
    assert all(dotted_exists(n) for n in named(text, DOTTED))
    assert not path_exists("gateway/old/gone.py")
    assert dotted_exists("gateway.protocols.<name>.codec")
    assert dotted_exists("gateway.backends.upstream")
    assert dotted_exists("gateway.backends.upstream.<protocol>.make")
    assert not dotted_exists("gateway.protocols.<name>.no_such_module")
    assert not dotted_exists("gateway.backends.upstream.kafka08_client")
    assert not dotted_exists("gateway.protocols.driver.no_such_function")
    # a module file of another tree is found by its path, and its names by parsing it
    (tmp_path / "gateway" / "pkg").mkdir(parents=True)
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "pkg" / "mod.py").write_text("class Thing: ...\nVALUE: int = 1\n")
    assert dotted_exists("gateway.pkg.mod.Thing.method", tmp_path)
    assert dotted_exists("gateway.pkg.mod.VALUE", tmp_path)
    assert not dotted_exists("gateway.pkg.mod.Other", tmp_path)
    assert not dotted_exists("gateway.pkg.other", tmp_path)
