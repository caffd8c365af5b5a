"""The interoperability matrix: every ordered pair of the six clients (one per protocol, plus
today's Kafka client), 100 records with keys, headers and timestamps produced through one
listener and consumed through the other, every field both clients carry compared
(``gateway.interop.matrix.check_pair``).

The drivers of the five protocols are the in-repo clients on each protocol's codec in its client
role (``gateway.interop.drivers``); each listener is proven against real third-party clients in
its own tests (tests/protocols/*). The sixth, ``kafka``, is the real confluent-kafka (librdkafka,
its defaults: record batches v2 with headers) from the confluent-kafka venv
(.ci/deps/kafka08.sh), on the same Kafka listener as kafka08. One gateway serves all 36 pairs (a
topic per pair); every chain runs all 36 too.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import trio

from gateway.interop.drivers import CLIENTS, DRIVERS, PROTOCOLS, KafkaDriver
from gateway.interop.matrix import (
    PairResult,
    check_pair,
    client_addresses,
    format_table,
    matrix_records,
    run_matrix,
    upstream_fields,
)
from gateway.model import Record
from tests.protocols.kafka08.conftest import venv_python
from tests.support import GatewayProcess

PAIRS = [(p, c) for p in CLIENTS for c in CLIENTS]
LISTENERS = {name: {} for name in PROTOCOLS}
# the Kafka listener shows other protocols' reserved ``_gw.*`` headers to today's Kafka clients
# (a Liftbridge publish's correlation id): the other listeners leave them out. Direct path only.


def run(gateway: GatewayProcess, **kw: object) -> dict[tuple[str, str], PairResult]:
    """The matrix of every client against ``gateway``'s listeners."""
    addresses = client_addresses({name: gateway.address(name) for name in PROTOCOLS})
    options = {"kafka": {"python": venv_python("confluent-kafka")}}
    results = trio.run(lambda: run_matrix(addresses, count=100, options=options, **kw))
    print(format_table(results))
    return {(r.producer, r.consumer): r for r in results}


@pytest.fixture(scope="module")
def embedded_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The gateway on the embedded backend: the direct matrix runs on it, and it is gateway B
    (the upstream server) of the chains."""
    with GatewayProcess(
        tmp_path_factory.mktemp("matrix"), listeners=LISTENERS, backend="embedded"
    ) as gw:
        yield gw


@pytest.fixture(scope="module")
def embedded_matrix(embedded_gateway: GatewayProcess) -> dict:
    return run(embedded_gateway)


@pytest.fixture(scope="module")
def chain_matrices(
    tmp_path_factory: pytest.TempPathFactory, embedded_gateway: GatewayProcess
) -> dict:
    """{upstream protocol: matrix results through a gateway chained to it}. The five chained
    gateways start together (a start is seconds of imports); the matrices run one at a time."""
    root = tmp_path_factory.mktemp("chains")
    out = {}
    # gateway B, the upstream server, is the embedded gateway
    upstream_server = {name: embedded_gateway.address(name) for name in PROTOCOLS}
    chained = {}
    for through in PROTOCOLS:
        host, port = upstream_server[through]
        backend: dict[str, object] = {
            "type": "upstream",
            "protocol": through,
            "address": f"{host}:{port}",
        }
        if through in ("tank", "kafka08"):
            # brokers without groups: the Cursus consumer's group lives in this one gateway
            backend["local_groups"] = True
        chained[through] = GatewayProcess(
            root / through, listeners=LISTENERS, backends={"default": backend}
        )
    try:
        with ThreadPoolExecutor(len(chained)) as pool:
            list(pool.map(GatewayProcess.start, chained.values()))
        for through, a in chained.items():
            print(f"== through an upstream {through} backend")
            out[through] = run(
                a,
                through=through,
                create_at=upstream_server,
                prefix=f"chain-{through}-",
            )
    finally:
        for a in chained.values():
            if a.proc is not None:
                a.stop()
    return out


def pairs(through: str | None = None) -> list:
    """PAIRS as parameters, named by producer and consumer (and the upstream chain)."""
    out = []
    for p, c in PAIRS:
        prefix = [through] if through else []
        ident = f"via-{through}-{p}-to-{c}" if through else f"{p}-to-{c}"
        out.append(pytest.param(*prefix, p, c, id=ident))
    return out


@pytest.mark.parametrize(("producer", "consumer"), pairs())
def test_pair_on_the_embedded_backend(embedded_matrix: dict, producer: str, consumer: str) -> None:
    result = embedded_matrix[(producer, consumer)]
    assert result.ok, result.problems or result.error
    # the fields compared are exactly those both ends carry, and always the value
    both = DRIVERS[producer].produces & DRIVERS[consumer].consumes
    assert set(result.checked) == both and "value" in both


@pytest.mark.parametrize(
    ("through", "producer", "consumer"), [param for u in PROTOCOLS for param in pairs(u)]
)
def test_pair_through_an_upstream_chain(
    chain_matrices: dict, through: str, producer: str, consumer: str
) -> None:
    result = chain_matrices[through][(producer, consumer)]
    assert result.ok, result.problems or result.error
    both = DRIVERS[producer].produces & DRIVERS[consumer].consumes & upstream_fields(through)
    assert set(result.checked) == both


def test_what_the_upstreams_keep_matches_the_translation_table() -> None:
    assert {u: set(upstream_fields(u)) for u in PROTOCOLS} == {
        "kafka08": {"key", "value"},
        "iggy": {"value", "headers"},
        "tank": {"key", "value", "timestamp"},
        "liftbridge": {"key", "value", "headers"},
        "cursus": {"key", "value"},
    }


def test_what_the_drivers_declare_matches_the_translation_table() -> None:
    carried = {name: (d.produces, d.consumes) for name, d in DRIVERS.items()}
    all_fields = {"key", "value", "headers", "timestamp"}
    assert carried == {
        "kafka08": ({"key", "value", "timestamp"}, {"key", "value"}),
        "iggy": ({"key", "value", "headers"}, {"value", "headers", "timestamp"}),
        "tank": ({"key", "value", "timestamp"}, {"key", "value", "timestamp"}),
        "liftbridge": ({"key", "value", "headers"}, {"key", "value", "headers", "timestamp"}),
        "cursus": ({"key", "value"}, {"key", "value"}),
        "kafka": (all_fields, all_fields),
    }


def test_without_confluent_kafka_the_kafka_client_says_so() -> None:
    import importlib.util
    import sys

    # the test venv has no confluent-kafka (it lives in its own venv): the worker cannot start
    assert importlib.util.find_spec("confluent_kafka") is None

    async def main() -> str:
        driver = KafkaDriver("127.0.0.1", 1, python=sys.executable)
        try:
            with pytest.raises(RuntimeError) as err, trio.fail_after(30):
                await driver.open()
        finally:
            await driver.aclose()
        return str(err.value)

    message = trio.run(main)
    assert message.startswith("the confluent-kafka worker exited")
    assert "No module named 'confluent_kafka'" in message

    async def no_such_python() -> str:
        driver = KafkaDriver("127.0.0.1", 1, python="/nonexistent/bin/python")
        with pytest.raises(RuntimeError) as err:
            await driver.open()
        await driver.aclose()
        return str(err.value)

    assert trio.run(no_such_python).startswith(
        "cannot run /nonexistent/bin/python for the confluent-kafka worker"
    )


def test_the_check_catches_a_changed_field() -> None:
    sent = matrix_records("tank", "liftbridge", 3, 1_000_000_000)
    good = [r._replace(offset=i, headers=()) for i, r in enumerate(sent)]  # TANK has none
    tank, lb, iggy = DRIVERS["tank"], DRIVERS["liftbridge"], DRIVERS["iggy"]
    window = (0, 1)
    assert check_pair(sent, good, tank, lb, window)[1] == []
    for bad in (
        good[1]._replace(key=b"other"),
        good[1]._replace(value=b"other"),
        good[1]._replace(timestamp_us=good[1].timestamp_us + 1),
        good[1]._replace(offset=7),
        good[1]._replace(headers=(("x", b"y"),)),  # tank produces no headers: none expected
    ):
        got = [good[0], bad, good[2]]
        assert check_pair(sent, got, tank, lb, window)[1], bad
    assert check_pair(sent, good[:2], tank, lb, window)[1] == ["consumed 2 of 3 records"]
    # a consumer-only timestamp must be the append time, within the window
    polled = [Record(None, r.value, r.headers, 5, i) for i, r in enumerate(sent)]
    assert check_pair(
        sent, [polled[0], polled[1]._replace(headers=()), polled[2]], lb, iggy, (0, 10)
    )[1]
    lb_to_iggy = check_pair(sent, polled, lb, iggy, (0, 10))
    assert lb_to_iggy == (("value", "headers"), [])
    assert check_pair(sent, polled, lb, iggy, (6, 10))[1]


def test_the_table_reads_at_a_glance() -> None:
    results = [
        PairResult("tank", "tank", 100, ("key", "value"), True, produce_s=0.01, consume_s=0.01),
        PairResult("tank", "iggy", 100, ("value",), False, "record 0: value b'x'"),
    ]
    text = format_table(results)
    assert "ok 5,000/s" in text and "FAIL" in text and "1/2 pairs passed" in text
    assert "tank->iggy: record 0: value b'x'" in text
    md = format_table(results, markdown=True)
    assert md.splitlines()[0] == "| producer \\ consumer | tank | iggy |"
    assert md.splitlines()[1] == "|---|---|---|"


def test_a_kafka_call_cut_short_stops_the_worker(embedded_gateway: GatewayProcess) -> None:
    """A cancelled call (the pair's deadline) would leave its answer in the pipe for the next
    call: the driver stops the worker instead, and says so."""

    async def main() -> str:
        driver = KafkaDriver(
            *embedded_gateway.address("kafka08"), python=venv_python("confluent-kafka")
        )
        await driver.open()
        try:
            await driver.create_topic("cut-short", 1)
            with trio.move_on_after(1) as scope:
                await driver.consume("cut-short", 1)  # nothing there: waits
            assert scope.cancelled_caught
            assert driver.process is None
            with pytest.raises(RuntimeError) as err:
                await driver.consume("cut-short", 1)
            return str(err.value)
        finally:
            await driver.aclose()

    assert "worker was stopped (an earlier call timed out)" in trio.run(main)
