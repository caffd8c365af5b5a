#!/usr/bin/env bash
# Real Kafka 0.8 clients for tests/protocols/kafka08 and bench/kafka08.py (idempotent, run as root).
#   kcat (Debian), kafka-python 3.0.12 and 2.3.3 (own venvs), confluent-kafka 2.16.1 (own venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"

if ! command -v kcat >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends kcat >/dev/null
fi

venv() {  # venv NAME PACKAGE==VERSION...
    local dir="$ROOT/.test-venvs/$1"
    shift
    local stamp="$dir/.installed"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$*" ]]; then
        return 0
    fi
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check "$@"
    echo "$*" >"$stamp"
}

venv kafka-python-3 kafka-python==3.0.12 python-snappy==0.7.3 lz4==4.4.5 xxhash==3.6.0
venv kafka-python-2 kafka-python==2.3.3 python-snappy==0.7.3 lz4==4.4.5 xxhash==3.6.0
venv confluent-kafka confluent-kafka==2.16.1
