"""``make bench``: run every bench/ driver with a fixed workload, collect their JSON results from
bench/results/, and write ``bench/results/latest.json`` and ``bench/results/REPORT.md`` with PNG
charts (matplotlib, the ``bench`` extra).

Each driver runs in its own process, one after the other (never two at once: they would measure
each other), with a time limit; a driver that fails or times out is reported as such and the run
goes on. The report has, per protocol and path: records/s and MB/s for produce and fetch, the
in-process baseline measured by the same driver in the same run and the ratio to it, which load
generator drove it, p50/p99/p999 request latency (bench/latency.py) and the idle-connection
memory. Not run here: bench/pipeline.py (Spark: two JVMs and minutes of exports before its
ratio means anything, the Spark export's own benchmark); the targets table shows its last published
run (``bench/results/pipeline.jsonl``), marked as such.

Usage: ``python bench/run.py [--only NAME,...] [--report-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import targets  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PY = sys.executable
EMBEDDED_FSYNC = "every 50 ms (the embedded backend's default `fsync = 50`)"

KCAT = "kcat (librdkafka, C) in 0.8.2 mode"
OWN = "in-repo codec client, one blocking socket, separate process from the gateway"


# name, argv, result file, time limit (s), load generator
# environment overrides: fewer repeats where a driver has no option for it (time budget)
ENV = {"cursus": {"BENCH_REPEATS": "1"}}

DRIVERS: list[tuple[str, list[str], str, int, str]] = [
    (
        "latency",
        ["bench/latency.py"],
        "latency.json",
        420,
        "bench/loadgen.c (C): latency, saturation; in-repo codec clients: batches",
    ),
    (
        "kafka08",
        ["bench/kafka08.py", "--records", "100000", "--repeat", "2"],
        "kafka08.json",
        120,
        KCAT,
    ),
    (
        "kafka",
        ["bench/kafka.py", "--records", "300000", "--runs", "2"],
        "kafka.json",
        150,
        "confluent-kafka (librdkafka 2.16, today's APIs), default batching",
    ),
    ("tank", ["bench/tank.py"], "tank.json", 120, "in-repo TANK client (codec), 8 in flight"),
    ("iggy", ["bench/iggy.py"], "iggy.json", 120, OWN),
    ("cursus", ["bench/cursus.py"], "cursus.json", 120, OWN),
    (
        "liftbridge",
        ["bench/liftbridge.py", "--messages", "10000", "--backend", "memory"],
        "liftbridge.json",
        120,
        "grpcio (C core) in its own process, and the in-repo codec client",
    ),
    ("embedded_log", ["bench/embedded_log.py"], "embedded_log.json", 120, "in-process"),
    (
        "workers",
        ["bench/workers.py"],
        "workers.json",
        150,
        f"{KCAT}; bench/loadgen.c (C): produce_c32",
    ),
    (
        "backends",
        ["bench/backends.py", "--records", "30000", "--kafka-records", "1000000", "--runs", "1"],
        "backends.json",
        150,
        "kcat; nats-py and confluent-kafka for the direct rows",
    ),
    (
        "matrix",
        ["bench/matrix.py", "--records", "500"],
        "matrix.json",
        150,
        "in-repo codec clients (gateway.interop.drivers), one connection per protocol",
    ),
    (
        "nats_bridge",
        ["bench/nats_bridge.py", "1000", "20000"],
        "nats_bridge.json",
        120,
        "the gateway's own NATS client; nats-py through trio-asyncio; nats-py on a loop thread",
    ),
    (
        "metadata_freeze",
        ["bench/metadata_freeze.py"],
        "metadata_freeze.json",
        120,
        "a raw Kafka 0.8 socket (our codec) and the in-repo Cursus client",
    ),
]


def run_driver(name: str, argv: list[str], limit: int) -> dict[str, Any]:
    if not (ROOT / argv[0]).exists():
        return {"status": "missing", "seconds": 0.0}
    log = RESULTS / f"{name}.log"
    started = time.perf_counter()
    print(f"== {name}: {' '.join(argv)} (limit {limit} s)", flush=True)
    with open(log, "w") as out:
        # own process group: on a time-out the driver's gateway subprocesses go with it
        proc = subprocess.Popen(
            [PY, *argv],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV.get(name, {})},
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=limit)
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"timed out after {limit} s"
    seconds = round(time.perf_counter() - started, 1)
    print(f"   {status} in {seconds} s (output in bench/results/{name}.log)", flush=True)
    return {"status": status, "seconds": seconds}


# ----------------------------------------------------------------------------- normalising

Row = dict[str, Any]


def row(
    protocol: str,
    path: str,
    op: str,
    rps: float | None,
    base: float | None,
    value_bytes: int,
    generator: str,
    source: str,
) -> Row:
    return {
        "protocol": protocol,
        "path": path,
        "op": op,
        "records_per_s": round(rps) if rps else None,
        "mb_per_s": round(rps * value_bytes / 1e6, 2) if rps else None,
        "baseline_records_per_s": round(base) if base else None,
        "ratio_to_baseline": round(rps / base, 3) if rps and base else None,
        "value_bytes": value_bytes,
        "generator": generator,
        "source": source,
    }


def rows_kafka08(d: dict) -> list[Row]:
    out = []
    for backend, ops in d.get("runs", {}).items():
        for op, r in ops.items():
            out.append(
                row(
                    "kafka08",
                    f"gateway ({backend})",
                    op,
                    r["listener_records_per_s"],
                    r["baseline_records_per_s"],
                    100,
                    KCAT,
                    "kafka08",
                )
            )
    return out


def rows_kafka(d: dict) -> list[Row]:
    """Today's Kafka protocol: the gateway (embedded log) beside Tansu, same client."""
    return [
        row(
            "kafka08",
            "gateway (embedded), today's APIs",
            op,
            r["gateway_records_per_s"],
            r["tansu_records_per_s"],
            100,
            "confluent-kafka (librdkafka 2.16), default batching; baseline: Tansu direct",
            "kafka",
        )
        for op, r in d.get("phases", {}).items()
    ]


def rows_tank(d: dict) -> list[Row]:
    out = []
    for comp, r in d.get("runs", {}).items():
        for op, key in (("produce", "produce_msgs_per_s"), ("fetch", "consume_msgs_per_s")):
            out.append(
                row(
                    "tank",
                    f"gateway (memory, {comp})",
                    op,
                    r["tank"][key],
                    r["baseline"][key],
                    100,
                    "in-repo TANK client",
                    "tank",
                )
            )
    return out


def rows_pair(protocol: str, keys: tuple[str, str]) -> Callable[[dict], list[Row]]:
    def rows(d: dict) -> list[Row]:
        out = []
        for backend in ("memory", "embedded"):
            if backend not in d:
                continue
            g, b = d[backend]["gateway"], d[backend]["baseline"]
            for op, k in zip(("produce", "fetch"), keys, strict=True):
                out.append(
                    row(
                        protocol, f"gateway ({backend})", op, g.get(k), b.get(k), 100, OWN, protocol
                    )
                )
        return out

    return rows


def rows_latency(d: dict) -> list[Row]:
    out = []
    base = d.get("baseline", {})
    for protocol, r in d.get("protocols", {}).items():
        for size, b in r.get("batches", {}).items():
            for op in ("produce", "fetch"):
                out.append(
                    row(
                        protocol,
                        f"gateway (memory), {size} B records",
                        op,
                        b[f"{op}_records_per_s"],
                        base.get(f"{op}_{size}_records_per_s"),
                        int(size),
                        "in-repo codec client (interop drivers)",
                        "latency",
                    )
                )
    return out


def rows_backends(d: dict) -> list[Row]:
    out = []
    rps = d.get("records_per_s", {})
    base = rps.get("gateway -> embedded", {})
    for path, ops in rps.items():
        if path == "gateway -> embedded":
            continue
        for op, v in ops.items():
            proto = "kafka08" if path.startswith("gateway") else "direct client"
            gen = KCAT if path.startswith("gateway") else path.removesuffix(" direct")
            out.append(row(proto, path, op, v, base.get(op), 100, gen, "backends"))
    return out


def rows_embedded(d: dict) -> list[Row]:
    out = []
    r = d.get("runs", {}).get("1000", {})
    if r:
        for op, k in (("produce", "appends_per_s"), ("fetch", "reads_per_s")):
            out.append(
                row(
                    "(none: backend)",
                    "embedded log, batches of 1000",
                    op,
                    r["embedded"][k],
                    r["memory"][k],
                    100,
                    "in-process",
                    "embedded_log",
                )
            )
    return out


def rows_liftbridge(d: dict) -> list[Row]:
    out = []
    value = d.get("workload", {}).get("value_bytes", 256)
    for backend, ops in d.get("runs", {}).items():
        for op, name in (("publish", "produce"), ("subscribe", "fetch")):
            r = ops.get(op, {})
            for client in ("grpcio", "codec"):
                if client in r:
                    out.append(row("liftbridge", f"gateway ({backend}), {client} client", name,
                                   r[client]["messages_per_s"], r["baseline_messages_per_s"],
                                   value, client, "liftbridge"))  # fmt: skip
    return out


def rows_matrix(d: dict) -> list[Row]:
    """All producer -> consumer pairs together, direct and through each upstream chain."""
    rps = d.get("all_pairs_records_per_s", {})
    base = rps.get("direct")
    gen = "in-repo codec clients" + (
        ", confluent-kafka" if "kafka" in d["workload"].get("clients", ()) else ""
    )
    label = f"({d['workload']['pairs']} pairs)"
    return [
        row(label, path, "produce + consume", v, base, 30, gen, "matrix")
        for path, v in rps.items()
        if path != "direct"
    ]


def rows_nats_bridge(d: dict) -> list[Row]:
    """JetStream from trio code: nats-py through two bridges against the gateway's client."""
    per_s = d.get("per_s", {})
    base = per_s.get("native", {})
    return [
        row("(NATS client)", path, op, r.get(op), base.get(op), 100, path, "nats_bridge")
        for path, r in per_s.items()
        if path != "native"
        for op in ("publish", "fetch")
    ]


NORMALISERS: dict[str, Callable[[dict], list[Row]]] = {
    "kafka08": rows_kafka08,
    "kafka": rows_kafka,
    "tank": rows_tank,
    "iggy": rows_pair("iggy", ("send_msgs_per_s", "poll_msgs_per_s")),
    "cursus": rows_pair("cursus", ("produce_msgs_per_s", "consume_msgs_per_s")),
    "latency": rows_latency,
    "liftbridge": rows_liftbridge,
    "backends": rows_backends,
    "embedded_log": rows_embedded,
    "matrix": rows_matrix,
    "nats_bridge": rows_nats_bridge,
}


# ----------------------------------------------------------------------------- report


def charts(latest: dict) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    rows = [r for r in latest["throughput"] if r["records_per_s"] and r["source"] != "backends"]
    for op in ("produce", "fetch"):
        sel = [r for r in rows if r["op"] == op]
        if not sel:
            continue
        labels = [f"{r['protocol']}\n{r['path']}" for r in sel]
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(sel) + 1.5))
        y = range(len(sel))
        ax.barh([i + 0.2 for i in y], [r["records_per_s"] for r in sel], 0.4, label="gateway")
        ax.barh(
            [i - 0.2 for i in y],
            [r["baseline_records_per_s"] or 0 for r in sel],
            0.4,
            label="in-process baseline",
        )
        ax.set_yticks(list(y), labels, fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("records/s (log)")
        ax.set_title(f"{op}: records/s per protocol and path")
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{op}.png"
        fig.savefig(RESULTS / name, dpi=90)
        plt.close(fig)
        made.append(name)
    lat = latest["drivers"].get("latency", {}).get("result") or {}
    protos = {p: r["load"] for p, r in lat.get("protocols", {}).items() if "load" in r}
    if protos:
        fig, ax = plt.subplots(figsize=(8, 4))
        names = list(protos)
        for k, (q, off) in enumerate((("p50", -0.25), ("p99", 0), ("p999", 0.25))):
            ax.bar(
                [i + off for i in range(len(names))],
                [max(0.001, protos[n][f"added_{q}_ms"]) for n in names],
                0.25,
                label=f"added {q}",
                color=f"C{k}",
            )
        ax.axhline(lat.get("target_added_p99_ms", 2.0), color="red", ls="--", label="p99 target")
        ax.set_xticks(range(len(names)), names)
        ax.set_yscale("log")
        ax.set_ylabel("ms added (gateway - direct path)\n0 or less drawn at 0.001")
        ax.set_title("latency added by the gateway at 50% of saturation (1-record produces)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / "latency.png", dpi=90)
        plt.close(fig)
        made.append("latency.png")
        fig, ax = plt.subplots(figsize=(8, 4))
        for p, r in protos.items():
            conc = r["concurrency"]
            ax.plot([int(c) for c in conc], [v["requests_per_s"] for v in conc.values()],
                    marker="o", label=p)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xlabel("connections")
        ax.set_ylabel("1-record produces/s")
        ax.set_title("concurrency (closed loop): 1-record produces/s over all connections")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "concurrency.png", dpi=90)
        plt.close(fig)
        made.append("concurrency.png")
    return made


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if v < 10 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def triple(d: dict, prefix: str = "") -> str:
    return " / ".join(fmt(d.get(f"{prefix}{q}_ms")) for q in ("p50", "p99", "p999"))


ADDED_BIAS = {
    "c": (
        "The direct path's figure includes the bench process's own open loop (trio, ~0.1-0.2 "
        "ms at p50) and the gateway path's only the C generator's few us, so the added figure "
        "can be lower than the gateway's share by up to that much (a negative added p50 is "
        "that); the gateway column is the gateway path's own latency, backend included."
    ),
    "python": "The added figure includes the client's encode/decode, an upper bound on the "
    "gateway's share.",
}


def latency_section(lat: dict) -> list[str]:
    protos = {p: r["load"] for p, r in lat.get("protocols", {}).items() if "load" in r}
    if not protos:
        return []
    w = lat["workload"]
    generator = w.get("gateway_path_generator", "python")
    target = lat.get("target_added_p99_ms", 2.0)
    max_steal = lat.get("max_steal_pct", 3.0)
    rounds = lat.get("rounds", {"asked": 3, "max": 6})
    lines = [
        "",
        "## Latency under load (bench/latency.py)",
        "",
        f"Workload: {w['latency']}. Backend: {w['latency_backend']}. Load generator: "
        f"{w['generator']} (the gateway in its own process). Added = gateway path minus direct "
        f"path (`Core.execute` in-process on the same backend), measured in this run at the "
        f"same rate; target: added p99 <= {target} ms. Latency runs from each "
        "request's release by the fixed-rate scheduler to its answer (a request waiting for a "
        "free connection counts that wait: no coordinated omission); the scheduler's own lag "
        f"behind the ideal send times is the `lag p99` column. {ADDED_BIAS[generator]} "
        "`machine` = busy CPUs "
        "of the whole machine during the gateway-path run (other work included); `steal` = the "
        "share of the CPUs' time the virtual machine's host ran something else during the "
        "gateway / direct run (/proc/stat). Each round is one gateway-path run, then one "
        "direct-path run at the same rate; a round with a run off its schedule or under more "
        f"than {max_steal:g}% steal is not counted, and the row shows the round with the median "
        f"added p99 of the counted ones ({rounds['asked']} asked, up to {rounds['max']} run "
        'within the time budget; fewer counted: "not measured").',
        "",
        "| protocol | saturation req/s (gateway / generator CPU, cores) | load req/s (achieved) "
        "| gateway p50 / p99 / p999 ms | direct p50 / p99 / p999 ms | added p50 / p99 / p999 ms "
        f"| added p99 <= {target} ms | gateway CPU us/req | generator CPU us/req | lag p99 ms "
        "gateway / direct | machine busy CPUs | steal % gateway / direct |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, r in protos.items():
        g, d = r["gateway"], r["direct"]
        sat = max(r["concurrency"].values(), key=lambda v: v["requests_per_s"])
        verdict = {True: "yes", False: "NO", None: "not measured"}[r["meets_target"]]
        counted = r.get("added_p99_ms_of_counted_rounds")
        if counted is not None:
            verdict += (
                f" (added p99 of the {len(counted)} counted of {len(r['rounds'])} rounds: "
                f"{' / '.join(fmt(x) for x in counted) or '-'})"
            )
        for path, run in (("gateway", g), ("direct", d)):
            if run.get("overloaded") or run["schedule_lag_p99_ms"] > 20:
                verdict += (
                    f" ({path} run did not keep its schedule: {fmt(run['achieved_rps'])} of "
                    f"{fmt(r['rate_rps'])} req/s, lag p99 {fmt(run['schedule_lag_p99_ms'])} ms)"
                )
            if run.get("host_steal_pct", 0) > max_steal:
                verdict += f" ({path} run: the host stole {run['host_steal_pct']}% of the CPUs)"
        lines.append(
            f"| {p} | {fmt(r['saturation_rps'])} ({sat['gateway_cpu_cores']} / "
            f"{sat['generator_cpu_cores']}) | {fmt(r['rate_rps'])} ({fmt(g['achieved_rps'])}) | "
            f"{triple(g)} | {triple(d)} | {triple(r, 'added_')} | {verdict} | "
            f"{fmt(g.get('gateway_cpu_us_per_request'))} | "
            f"{fmt(g.get('client_cpu_us_per_request'))} | {fmt(g['schedule_lag_p99_ms'])} / "
            f"{fmt(d['schedule_lag_p99_ms'])} | {g.get('machine_busy_cpus', '-')} | "
            f"{g.get('host_steal_pct', '-')} / {d.get('host_steal_pct', '-')} |"
        )
    met = [p for p, r in protos.items() if r["meets_target"]]
    missed = [p for p, r in protos.items() if r["meets_target"] is False]
    unmeasured = [p for p, r in protos.items() if r["meets_target"] is None]
    lines += [
        "",
        f"Met by: {', '.join(met) or 'none'}; not met by: {', '.join(missed) or 'none'}"
        + (
            f"; not measured (busy machine or host steal): {', '.join(unmeasured)}"
            if unmeasured
            else ""
        )
        + ". "
        "Closed-loop 1-record produces/s at 1 / 4 / 32 connections (the saturation search), "
        "then the repeats at the best count whose median is the saturation: "
        + "; ".join(
            f"{p} "
            + " / ".join(fmt(v["requests_per_s"]) for v in r["concurrency"].values())
            + (
                f" (median of {' / '.join(fmt(v) for v in r['saturation_runs_rps'])})"
                if "saturation_runs_rps" in r
                else ""
            )
            for p, r in protos.items()
        )
        + ".",
    ]
    return lines


def workers_section(w: dict) -> list[str]:
    best = w.get("best")
    if not best:
        return ["", "## Scale-out (bench/workers.py)", "", w.get("summary", "")] if w else []
    wl = w["workload"]
    cpus = w["machine"]["cpus"]
    lines = [
        "",
        "## Scale-out (bench/workers.py)",
        "",
        f"`gateway serve --workers N` on NATS JetStream, Kafka 0.8 listener, {wl['clients']} "
        f"{wl['generator']} x {wl['records_per_client']:,} records of {wl['value_bytes']} B; "
        f"produce: {wl['produce']}; fetch: {wl['fetch']}"
        + (f"; produce_c32: {wl['produce_c32']}" if "produce_c32" in wl else "")
        + f". Best of {wl['best_of']} alternating "
        "runs, with that run's CPU seconds per process (/proc; the clients' rusage). "
        f"Utilisation = CPU seconds / wall seconds (1.0 = one whole CPU of the {cpus}); "
        "`machine` = busy CPUs of the whole machine over the run, other work included.",
        "",
        "| workers | op | records/s | wall s | CPU s: gateway workers | clients | nats-server | "
        "worker utilisation | machine busy CPUs | records per gateway CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, ops in best.items():
        for op, r in ops.items():
            cpu = r["cpu_s"]
            workers = [v for k, v in cpu.items() if k.startswith("gateway worker")]
            lines.append(
                f"| {label} | {op} | {fmt(r['records_per_s'])} | {r['wall_s']} | "
                f"{' + '.join(map(str, workers))} | "
                f"{cpu.get('kcat (all clients)', cpu.get('loadgen'))} | "
                f"{cpu.get('nats-server')} | {' + '.join(map(str, r['worker_utilisation']))} | "
                f"{r['machine_busy_cpus']} of {cpus} | {fmt(r['records_per_gateway_cpu_s'])} |"
            )
    lines += ["", workers_verdict(w)]
    rb = w.get("rebalance")
    if rb:
        lines += [
            "",
            f"Group coordination through NATS: a rebalance of {rb['members']} Cursus members "
            f"spread over {rb['gateway_workers']} workers takes {rb['median_s']} s (median; "
            f"worst {rb['max_s']} s of {rb['groups']} groups) from the last join to every "
            "member holding its assignment of the final generation.",
        ]
    return lines


def workers_verdict(w: dict) -> str:
    best, cpus = w["best"], w["machine"]["cpus"]
    out = []
    for op in best["1 worker"]:
        one, two = best["1 worker"][op], best["2 workers"][op]
        ratio = two["records_per_s"] / one["records_per_s"]
        used1, used2 = sum(one["worker_utilisation"]), sum(two["worker_utilisation"])
        per_cpu = two["records_per_gateway_cpu_s"] / one["records_per_gateway_cpu_s"]
        text = (
            f"{op}: 2 workers / 1 = x{ratio:.2f} records/s; the gateway got {used1:.2f} CPU "
            f"with 1 worker and {used2:.2f} with 2 (records per gateway CPU-second "
            f"x{per_cpu:.2f})"
        )
        if ratio >= 1.15:
            text += ": the second worker added throughput"
        elif two["machine_busy_cpus"] >= 0.9 * cpus:
            text += (
                f"; the machine's {cpus} CPUs were {two['machine_busy_cpus']} busy during the "
                f"2-worker run ({one['machine_busy_cpus']} with 1 worker): no idle CPU was left "
                "for a second worker, so this run cannot show scale-out (rerun on a machine with "
                "spare cores)"
            )
        else:
            text += (
                f"; the machine had CPU to spare ({two['machine_busy_cpus']} of {cpus} busy) and "
                "the second worker still did not raise throughput: the limit is elsewhere "
                "(clients, nats-server, per-connection round trips)"
            )
        out.append(text)
    return "; ".join(out) + "."


def metadata_freeze_section(d: dict) -> list[str]:
    runs = d.get("runs")
    if not runs:
        return []
    w = d["workload"]
    lines = [
        "",
        "## A topic-creation storm (bench/metadata_freeze.py)",
        "",
        f"{w['request']} (auto-create on, {w['backend']}), while {w['bystander']}; baseline: "
        f"{w['baseline']}. The wait is what the client on the other listener waits at most "
        "for an answer while the request runs.",
        "",
        "| run | request s | topics created / refused | other listener: max wait ms "
        "(baseline) | p99 ms (baseline) | probes |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in runs.items():
        b, g = r["baseline"], r["during"]
        lines.append(
            f"| {label} | {r['attack_s']} | {r['topics_created']} / {r['topics_refused']} | "
            f"{g['max_ms']:.1f} ({b['max_ms']:.1f}) | {g['p99_ms']:.1f} ({b['p99_ms']:.1f}) | "
            f"{g['probes']} |"
        )
    return lines


def rerun_note(rerun: dict | None) -> str:
    """What a partial run (``--only``) says of itself in the report's header."""
    if not rerun:
        return ""
    return (
        f" Only {', '.join(rerun['drivers'])} ran at that time (`--only`); the other drivers' "
        f"figures are from the run of {rerun['others_from'] or 'an earlier time'} UTC."
    )


def targets_of(latest: dict) -> list[dict[str, Any]]:
    """The targets against this run, and the Spark export's against bench/pipeline.py's last."""
    path = RESULTS / "pipeline.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    runs = [json.loads(line) for line in lines if line.strip()]
    return targets.evaluate(latest["drivers"]) + targets.pipeline_targets(runs)


def report(latest: dict, images: list[str]) -> str:
    m = latest["machine"]
    lines = [
        "# Benchmark report (`make bench`)",
        "",
        f"Run at {latest['started']} UTC on {m['cpus']} CPUs, Python {m['python']}, load average "
        f"{m['load_average_at_start']} at the start (the load generators, the brokers and the "
        "gateway share these CPUs; every ratio compares against a baseline measured by "
        f"the same driver in this run). Whole run: {latest['seconds']} s. Embedded backend fsync: "
        f"{latest['embedded_fsync']}." + rerun_note(latest.get("rerun")),
        "",
        "## Drivers",
        "",
        "| driver | status | seconds | load generator |",
        "|---|---|---|---|",
    ]
    for name, d in latest["drivers"].items():
        lines.append(f"| {name} | {d['status']} | {d['seconds']} | {d['generator']} |")
    lines += targets.section(targets_of(latest))
    lines += [
        "",
        "## Throughput (records/s and MB/s of record values)",
        "",
        "Baseline: the driver's in-process `Core.execute` run on the same backend type (no "
        "network, no codec), measured in the same run. For `backends` rows the baseline is "
        "gateway -> embedded, for `embedded_log` rows the memory backend, for `(N pairs)` rows "
        "(bench/matrix.py: every producer -> consumer protocol pair, produce then consume, "
        "records/s over both) the direct path (one gateway) against the chain through an "
        "upstream of that protocol, for `(NATS client)` rows (bench/nats_bridge.py: JetStream "
        "from trio code, the design-time comparison behind the gateway's own NATS client) that "
        "client.",
        "",
        "| protocol | path | op | records/s | MB/s | baseline records/s | ratio | generator |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in latest["throughput"]:
        lines.append(
            f"| {r['protocol']} | {r['path']} | {r['op']} | {fmt(r['records_per_s'])} | "
            f"{fmt(r['mb_per_s'])} | {fmt(r['baseline_records_per_s'])} | "
            f"{fmt(r['ratio_to_baseline'])} | {r['generator']} |"
        )
    lat = latest["drivers"].get("latency", {}).get("result") or {}
    lines += latency_section(lat)
    idle = lat.get("idle")
    if idle:
        per = idle["bytes_per_idle_connection"]
        lines += [
            "",
            "## Idle connections",
            "",
            f"{idle['idle_connections']} idle TCP connections on the TANK listener: gateway RSS "
            f"{idle['rss_before_bytes'] / 2**20:.1f} MiB -> "
            f"{idle['rss_with_idle_bytes'] / 2**20:.1f} MiB, "
            f"**{per:,} bytes per connection** (target <= 65,536: "
            f"{'met' if per <= 65536 else 'NOT met'}). Active connection, 1000-record batches: "
            f"{fmt(idle['active_produce_records_per_s_without_idle'])} records/s without the idle "
            f"ones, {fmt(idle['active_produce_records_per_s_with_idle'])} with them.",
        ]
    lines += workers_section(latest["drivers"].get("workers", {}).get("result") or {})
    lines += metadata_freeze_section(
        latest["drivers"].get("metadata_freeze", {}).get("result") or {}
    )
    if images:
        lines += ["", "## Charts", ""] + [f"![{i}]({i})" for i in images]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated driver names")
    parser.add_argument("--report-only", action="store_true", help="re-read the results only")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    started = time.perf_counter()
    latest: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "embedded_fsync": EMBEDDED_FSYNC,
        "drivers": {},
        "throughput": [],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    last: dict[str, Any] = {}
    if (RESULTS / "latest.json").exists():
        last = json.loads((RESULTS / "latest.json").read_text())
    previous: dict[str, Any] = last.get("drivers", {})
    if args.report_only and "started" in last:
        # nothing ran: the report is still that run's, with its time and machine
        latest["started"], latest["machine"] = last["started"], last["machine"]
        if "rerun" in last:
            latest["rerun"] = last["rerun"]
    elif only:
        latest["rerun"] = {"drivers": sorted(only), "others_from": last.get("started")}
    for name, argv, result, limit, generator in DRIVERS:
        if args.report_only or (only and name not in only):
            # not run now: keep what the last run said of it (its result file is re-read)
            old = previous.get(name, {})
            info: dict[str, Any] = {
                "status": old.get("status", "not run"),
                "seconds": old.get("seconds", 0.0),
            }
        else:
            info = run_driver(name, argv, limit)
        info["generator"] = generator
        info["argv"] = argv
        path = RESULTS / result
        if path.exists() and info["status"] == "ok":
            info["result"] = json.loads(path.read_text())
            latest["throughput"] += NORMALISERS.get(name, lambda d: [])(info["result"])
        latest["drivers"][name] = info
    latest["seconds"] = round(time.perf_counter() - started, 1)
    if args.report_only and "seconds" in last and "rerun" not in last:
        latest["seconds"] = last["seconds"]  # nothing ran: that whole run's own time
    elif only or args.report_only:  # a partial run: the whole is the sum of the drivers' times
        latest["seconds"] = round(sum(d["seconds"] for d in latest["drivers"].values()), 1)
    latest["targets"] = targets_of(latest)
    (RESULTS / "latest.json").write_text(json.dumps(latest, indent=2) + "\n")
    images = charts(latest)
    (RESULTS / "REPORT.md").write_text(report(latest, images))
    print(f"written bench/results/latest.json and bench/results/REPORT.md ({latest['seconds']} s)")
    failed = [n for n, d in latest["drivers"].items() if d["status"] not in ("ok", "missing")]
    if failed:
        print(f"drivers that did not finish: {', '.join(failed)}")


if __name__ == "__main__":
    main()
