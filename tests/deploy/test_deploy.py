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


def k8s_files() -> list[Path]:
    """The manifests kubectl applies as they are (CRD examples are ``*.example.yaml``)."""
    k8s = REPO_ROOT / "deploy" / "k8s"
    return sorted(p for p in k8s.glob("*.yaml") if not p.name.endswith(".example.yaml"))


def k8s_docs(files: list[Path] | None = None) -> list[dict]:
    return [doc for f in (files or k8s_files()) for doc in yaml.safe_load_all(f.read_text()) if doc]


def test_kubernetes_manifests_validate() -> None:
    files = [str(p) for p in k8s_files()]
    assert len(files) >= 2
    proc = subprocess.run(
        [str(VENV_BIN / "kubernetes-validate"), "--strict", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = {doc["kind"] for doc in k8s_docs()}
    assert {"Pod", "Deployment", "Service", "ConfigMap"} <= kinds


def test_load_balancers_publish_no_admin_port() -> None:
    """Only the protocol ports face the outside; the admin port (its data API, /metrics) is
    reached inside the cluster through a ClusterIP Service, scraped through a PodMonitor."""
    docs = k8s_docs()
    admin_ports = set()
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for text in doc["data"].values():
                admin_ports.add(tomllib.loads(text).get("admin", {}).get("port", 9644))
    assert admin_ports == {9644}
    services = [d for d in docs if d["kind"] == "Service"]
    public = [s for s in services if s["spec"].get("type") in ("LoadBalancer", "NodePort")]
    assert public, "the Deployment is published through a LoadBalancer"
    for svc in public:
        for port in svc["spec"]["ports"]:
            assert port["port"] not in admin_ports, svc["metadata"]["name"]
            assert port.get("targetPort") not in ("admin", *admin_ports), port
            assert port.get("name") != "admin", port
    internal = [
        s
        for s in services
        if s["spec"].get("type", "ClusterIP") == "ClusterIP"
        and any(p.get("targetPort") == "admin" for p in s["spec"]["ports"])
    ]
    assert len(internal) == 1
    monitor = yaml.safe_load((REPO_ROOT / "deploy/k8s/podmonitor.example.yaml").read_text())
    assert monitor["kind"] == "PodMonitor"
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "admin", "path": "/metrics", "interval": "15s"}
    ]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert internal[0]["spec"]["selector"].items() <= labels.items()
    compose = yaml.safe_load((REPO_ROOT / "deploy" / "compose.yaml").read_text())
    assert "127.0.0.1:9644:9644" in compose["services"]["gateway"]["ports"]


def test_admin_token_file_is_the_mounted_secret() -> None:
    """The Deployment's config names a token file inside the Secret volume it mounts, and the
    configs without one bind the admin to 0.0.0.0, where the data API is then off."""
    for doc in k8s_docs():
        if doc["kind"] not in ("Deployment", "Pod"):
            continue
        pod = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
        config_map = next(v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v)
        text = next(
            d["data"]["gateway.toml"]
            for d in k8s_docs()
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map
        )
        admin = tomllib.loads(text)["admin"]
        token_file = admin.get("token_file")
        if token_file is None:
            assert admin["host"] == "0.0.0.0" and "tls_client_ca" not in admin
            continue
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        (container,) = [c for c in pod["containers"] if c["name"] == "gateway"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        directory = str(Path(token_file).parent)
        assert mounts.get(directory) in secrets, (token_file, mounts)


def embedded_configs() -> list[tuple[str, str]]:
    out = []
    for f in k8s_files():
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
    token = tmp_path / "token"
    token.write_text("a-token-as-the-secret-holds\n")
    for name, text in configs:
        path = tmp_path / name.replace(":", "_")
        path.write_text(text)
        env = dict(os.environ)
        if "token_file" in tomllib.loads(text).get("admin", {}):
            env["GATEWAY_ADMIN__TOKEN_FILE"] = str(token)  # where the Secret is mounted
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "check-config", "--file-only", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=env,
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
