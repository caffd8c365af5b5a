"""``gateway groups delete``: an empty group's snapshot and committed offsets go; a group with
live members or an unknown one is a one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gateway.cli_admin import direct
from gateway.config import load_config
from gateway.model import CommitOffset, CreateTopic
from tests.support import REPO_ROOT, make_config, write_toml


def gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def test_groups_delete_on_the_store_directly(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(write_toml(make_config(tmp_path, backend="embedded", admin=False)))
    cfg = str(path)

    async def setup(core) -> None:  # type: ignore[no-untyped-def]
        await core.execute(CreateTopic("t", 2))
        await core.execute(CommitOffset("g", "t", 0, 0, ""))
        await core.execute(CommitOffset("g", "t", 1, 0, ""))
        await core.execute(CommitOffset("other", "t", 0, 0, ""))

    direct(load_config(cfg), setup)
    res = gateway("groups", "delete", "g", "--config", cfg)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "deleted group g (2 committed offset(s))\n"
    listed = gateway("groups", "list", "--config", cfg).stdout.splitlines()
    assert [line.split("\t")[0] for line in listed] == ["other"]
    res = gateway("groups", "delete", "g", "--config", cfg)
    assert res.returncode == 1 and res.stderr == "error: unknown group 'g'\n"
