"""Deployment artefacts: the Dockerfile passes hadolint and its install steps work; the
Kubernetes manifests validate against the Kubernetes schemas; every embedded config is valid.

No Docker engine runs here, so the Dockerfile's steps are replayed: its COPY lines copy from a
clean copy of the tree (``git ls-files``) into a scratch root, its ``pip install`` runs in a fresh
venv, and the gateway starts from that venv with the image's ENV, ENTRYPOINT and CMD.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import yaml

from tests.support import REPO_ROOT

VENV_BIN = Path(sys.executable).parent


def test_dockerfile_passes_hadolint() -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "hadolint"), "--failure-threshold", "info", "Dockerfile"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_manifests_validate() -> None:
    files = sorted(str(p) for p in (REPO_ROOT / "deploy" / "k8s").glob("*.yaml"))
    assert len(files) >= 2
    proc = subprocess.run(
        [str(VENV_BIN / "kubernetes-validate"), "--strict", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = {doc["kind"] for f in files for doc in yaml.safe_load_all(Path(f).read_text()) if doc}
    assert {"Pod", "Deployment", "Service", "ConfigMap"} <= kinds


def embedded_configs() -> list[tuple[str, str]]:
    out = []
    for f in sorted((REPO_ROOT / "deploy" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc["kind"] == "ConfigMap":
                out.extend(
                    (f"{f.name}:{k}", v) for k, v in doc["data"].items() if k.endswith(".toml")
                )
    out.append(
        ("compose-gateway.toml", (REPO_ROOT / "deploy" / "compose-gateway.toml").read_text())
    )
    return out


def test_every_shipped_config_passes_check_config(tmp_path) -> None:
    configs = embedded_configs()
    assert len(configs) == 3
    for name, text in configs:
        path = tmp_path / name.replace(":", "_")
        path.write_text(text)
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "check-config", "--file-only", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )
        assert proc.returncode == 0, f"{name}: {proc.stderr}"


def test_compose_file_runs_the_gateway_with_nats() -> None:
    compose = yaml.safe_load((REPO_ROOT / "deploy" / "compose.yaml").read_text())
    assert set(compose["services"]) == {"gateway", "nats"}
    assert "-js" in compose["services"]["nats"]["command"]
    assert compose["services"]["gateway"]["build"]["context"] == ".."


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    steps, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            instr, _, rest = current.strip().partition(" ")
            steps.append((instr.upper(), rest.strip()))
            current = ""
    return steps


def test_dockerfile_install_steps_work_in_a_fresh_venv(tmp_path) -> None:
    clean = tmp_path / "clean"
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        if (REPO_ROOT / rel).is_file():
            (clean / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, clean / rel)
    root = tmp_path / "image"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ}
    workdir = root
    entrypoint: list[str] = []
    cmd: list[str] = []

    def in_image(path: str) -> Path:
        return root / path.lstrip("/") if path.startswith("/") else workdir / path

    for instr, rest in parse_dockerfile((clean / "Dockerfile").read_text()):
        if instr == "WORKDIR":
            workdir = in_image(rest)
            workdir.mkdir(parents=True, exist_ok=True)
        elif instr == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
        elif instr == "COPY":
            *srcs, dest = shlex.split(rest)
            target = in_image(dest)
            for src in srcs:
                source = clean / src
                if dest.endswith("/"):
                    target.mkdir(parents=True, exist_ok=True)
                    to = target / source.name
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    to = target
                if source.is_dir():
                    shutil.copytree(source, to)
                else:
                    shutil.copy2(source, to)
        elif instr == "RUN":
            first = rest.split("&&")[0].strip()
            assert first.startswith("pip install"), "only the pip step is replayed"
            args = shlex.split(first)[2:]
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", *args],
                cwd=workdir,
                check=True,
                env=env,
            )
        elif instr == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif instr == "CMD":
            cmd = json.loads(rest)
    argv = entrypoint + cmd
    assert argv[:2] == ["gateway", "serve"]
    config = argv[argv.index("--config") + 1]
    env["GATEWAY_SERVER__DATA_DIR"] = str(tmp_path / "data")
    env["GATEWAY_ADMIN__PORT"] = "0"
    for listener in tomllib.loads(in_image(config).read_text()).get("listeners", {}):
        env[f"GATEWAY_LISTENERS__{listener.upper()}__PORT"] = "0"
    proc = subprocess.Popen(
        [str(venv / "bin" / "gateway"), "serve", "--config", str(in_image(config))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("listening admin="), proc.stderr.read1().decode()
        admin = line.split()[1].split("=", 1)[1]
        with urllib.request.urlopen(f"http://{admin}/healthz", timeout=10) as resp:
            assert resp.status == 200
        assert (
            "site-packages"
            in subprocess.run(
                [str(venv / "bin" / "python"), "-c", "import gateway; print(gateway.__file__)"],
                capture_output=True,
                text=True,
                check=True,
                cwd=tmp_path,
            ).stdout
        )
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
