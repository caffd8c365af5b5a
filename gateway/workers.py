"""``gateway serve --workers N``: N server processes sharing every listening port with
SO_REUSEPORT (the kernel spreads new connections over the processes).

The parent resolves each port once (a listener on port 0 gets one concrete port for all workers),
holds it with a bound, non-listening SO_REUSEPORT socket, forks the workers (each runs the normal
``Server`` with its own SO_REUSEPORT listening sockets, admin endpoint included), forwards
SIGTERM/SIGINT/SIGHUP to them and exits with the worst exit code once all are gone. Workers share
nothing but the backend, so only backends that several processes can share are allowed: nats,
kafka and upstream (the state lives in another server), and memory for tests (each worker then
has its own, unshared log). The embedded log is refused: one process owns its directory.

Each worker also answers its siblings on a unix socket in a private run directory, so that the
one answering a scrape of the shared admin port can show every worker's metrics and status
(gateway/metrics_view.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import structlog
import trio

from gateway.config import BackendConfig, GatewayConfig
from gateway.metrics_view import Peers, serve_peers
from gateway.reuseport import addresses, reuseport_socket

SHAREABLE_BACKENDS = frozenset({"nats", "kafka", "upstream", "memory"})
# listeners that keep state in the process beside the backend (docs/scaling.md)
PER_PROCESS_STATE = {
    "cursus": "consumer-group memberships (JOIN/SYNC/HEARTBEAT) and assignments",
    "iggy": "consumer-group memberships",
    "liftbridge": "paused and readonly partition flags",
}
GROUP_LISTENERS = frozenset({"cursus", "iggy"})  # their entries above are group memberships
# on these backends (holding the catch-all route) the state above lives in the backend: shared
SHARED_GROUP_BACKENDS = frozenset({"nats"})

log = structlog.get_logger("gateway.workers")


class WorkersError(Exception):
    pass


def check_shareable(config: GatewayConfig) -> None:
    bad = sorted(
        f"{name} (type {b.type})"
        for name, b in config.backends.items()
        if b.type not in SHAREABLE_BACKENDS
    )
    if bad:
        raise WorkersError(
            f"--workers needs backends that several processes can share "
            f"({', '.join(sorted(SHAREABLE_BACKENDS))}); not: {', '.join(bad)}. "
            "The embedded log belongs to one process: run one worker, or use nats or kafka."
        )


def per_process_state(config: GatewayConfig) -> list[str]:
    """What the enabled listeners keep per process, which workers do not share: members of
    one group connected to different workers form separate groups (overlapping assignments).
    On a NATS default backend all of it lives in the backend and is shared; on an upstream
    backend whose broker runs the groups (Cursus), or that refuses them (TANK, Kafka 0.8
    without ``local_groups``), or on a Kafka backend (the cluster's group coordinator runs the
    groups), no process keeps group members either."""
    default = _default_backend(config)
    nats = default is not None and default.type in SHARED_GROUP_BACKENDS
    groups_shared = nats or _groups_outside_the_process(default)
    return [
        f"{name}: {what}"
        for name, what in PER_PROCESS_STATE.items()
        if name in config.listeners
        and config.listeners[name].enabled
        and not (groups_shared if name in GROUP_LISTENERS else nats)
    ]


def _groups_outside_the_process(backend: BackendConfig | None) -> bool:
    """True when the core keeps no group members in the process on ``backend``: its server
    runs the groups (``groups = "backend"``: a Kafka cluster's group coordinator, an upstream
    broker's groups) or joins are refused (``"none"``)."""
    if backend is not None and backend.type == "kafka":
        return True
    if backend is None or backend.type != "upstream":
        return False
    from gateway.backends.upstream import make_upstream  # the protocol modules, on demand

    return make_upstream(backend.name, backend.options).capabilities.groups != "gateway"


def _default_backend(config: GatewayConfig) -> BackendConfig | None:
    """The backend holding group state: the catch-all route's, else the first."""
    for route in config.routes:
        if route.topic == "*" and route.backend in config.backends:
            return config.backends[route.backend]
    return next(iter(config.backends.values()), None)


def _hold_ports(config: GatewayConfig) -> tuple[GatewayConfig, list[socket.socket]]:
    """Bind (not listen) one SO_REUSEPORT socket per port so that port 0 becomes one concrete
    port shared by all workers; returns the config with the concrete ports."""
    held: list[socket.socket] = []

    def hold(host: str, port: int) -> int:
        family, addr = addresses(host, port)[0]
        sock = reuseport_socket(addr, port, family)
        held.append(sock)
        return sock.getsockname()[1]

    listeners = {}
    for name, lc in config.listeners.items():
        if lc.enabled:
            lc = dataclasses.replace(lc, port=hold(lc.host, lc.port))
        listeners[name] = lc
    admin = config.admin
    if admin.enabled:
        admin = dataclasses.replace(admin, port=hold(admin.host, admin.port))
    return dataclasses.replace(config, listeners=listeners, admin=admin), held


async def _worker(config: GatewayConfig, ready_fd: int, peers: Peers) -> int:
    from gateway.server import Server

    server = Server(config, reuse_port=True)
    server.peers = peers  # type: ignore[attr-defined]  # /metrics and /v1/status merge workers
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_peers, server, peers)

        async def run(task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await server.run(announce=False, freeze_heap=True, task_status=task_status)
            finally:  # the server stopped: so does the siblings' socket
                nursery.cancel_scope.cancel()

        await nursery.start(run)
        os.write(ready_fd, (server.listening_line() + "\n").encode())
        os.close(ready_fd)
    return 0


def _run_worker(config: GatewayConfig, ready_fd: int, peers: Peers) -> int:
    try:
        return trio.run(_worker, config, ready_fd, peers)
    except KeyboardInterrupt:
        return 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code if isinstance(exc.code, int) else 1


def run_workers(config: GatewayConfig, workers: int) -> int:
    """Fork ``workers`` servers on shared ports; prints the ``listening`` line once every worker
    listens; returns the worst exit code."""
    check_shareable(config)
    unshared = per_process_state(config)
    if unshared:
        log.warning(
            "workers_do_not_share",
            state=unshared,
            advice="members of one consumer group must reach the same worker: run one worker "
            "for those listeners, or pin clients with a balancer",
        )
    config, held = _hold_ports(config)
    run_dir = Path(tempfile.mkdtemp(prefix="gateway-workers-"))
    ready_r, ready_w = os.pipe()
    children: list[int] = []
    for index in range(workers):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(ready_r)
            for sock in held:
                sock.close()
            code = 1
            try:
                code = _run_worker(config, ready_w, Peers(run_dir, index, workers))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    os.close(ready_w)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    with os.fdopen(ready_r, "rb") as ready:
        lines = [ready.readline() for _ in range(workers)]
    if all(lines):
        print(lines[0].decode().rstrip("\n"), flush=True)
    else:  # a worker could not start: stop the others
        forward(signal.SIGTERM, None)
    worst = 0
    remaining = set(children)
    while remaining:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid in remaining:
            remaining.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            worst = max(worst, 128 - code if code < 0 else code)
    for sock in held:
        sock.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    return worst
