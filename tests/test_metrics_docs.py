"""docs/metrics.md lists every gateway_* metric the code registers, with its type and labels."""

from __future__ import annotations

import importlib
import pkgutil

from prometheus_client.metrics import MetricWrapperBase

import gateway.backends
import gateway.core
import gateway.protocols
from gateway.observability import REGISTRY
from tests.support import REPO_ROOT

DOC = REPO_ROOT / "docs" / "metrics.md"
# made by the merge of several workers' scrapes, not registered (gateway/metrics_view.py)
MERGED_ONLY = {"gateway_workers": ("gauge", ())}


def registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    for package in (gateway.backends, gateway.core, gateway.protocols):
        for mod in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(mod.name)
    importlib.import_module("gateway.server")
    importlib.import_module("gateway.metrics_view")
    out = dict(MERGED_ONLY)
    for collector in list(REGISTRY._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            out[name] = (collector._type, tuple(collector._labelnames))
        elif hasattr(collector, "LABELS"):  # a custom collector (the lag gauge)
            for family in collector.describe():
                out[family.name] = (family.type, tuple(collector.LABELS))
    return {k: v for k, v in out.items() if k.startswith("gateway_")}


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    out = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`gateway_"):
            labels = () if cells[2] in ("—", "") else tuple(x.strip() for x in cells[2].split(","))
            out[cells[0].strip("`")] = (cells[1], labels)
    return out


def test_the_metrics_table_matches_the_code() -> None:
    code, doc = registered(), documented()
    missing = {
        name: f"| `{name}` | {kind} | {', '.join(labels) or '—'} | ... |"
        for name, (kind, labels) in code.items()
        if name not in doc
    }
    assert not missing, "add to docs/metrics.md:\n" + "\n".join(missing.values())
    assert not set(doc) - set(code), f"documented but not in the code: {set(doc) - set(code)}"
    wrong = {n: (doc[n], code[n]) for n in code if doc[n] != code[n]}
    assert not wrong, f"type or labels differ (doc, code): {wrong}"
