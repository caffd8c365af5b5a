"""The admin status page rendered by a real browser (Debian's headless Chromium): the DOM holds
the listeners and topics, and a screenshot is taken."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request

from tests.support import GatewayProcess

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # we run as root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is installed by .ci/deps/ops.sh"
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_status_page_renders_listeners_and_topics(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backend="memory") as gw:
        req = urllib.request.Request(
            gw.admin_url + "/v1/topics",
            data=json.dumps({"name": "orders", "partitions": 2}).encode(),
            method="POST",
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).close()

        dom = chromium(tmp_path, "--dump-dom", gw.admin_url + "/")
        assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
        html = dom.stdout.decode()
        host, port = gw.address("kafka08")
        assert '<table id="listeners">' in html
        assert f"<td>kafka08</td><td>{host}:{port}</td>" in html
        assert '<table id="topics">' in html and "<td>orders</td>" in html
        assert 'http-equiv="refresh"' in html

        shot = tmp_path / "status.png"
        res = chromium(
            tmp_path, f"--screenshot={shot}", "--window-size=1024,768", gw.admin_url + "/"
        )
        assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
